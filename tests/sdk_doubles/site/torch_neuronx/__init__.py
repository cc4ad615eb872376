"""SDK double of ``torch_neuronx``: ``trace`` with the documented signature.

It checks the arguments, writes what neuronx-cc would leave in ``compiler_workdir``
(``graph.neff``, ``log-neuron-cc.txt``) and returns a CPU ``torch.jit.trace`` of the function, so
``torch.jit.save`` / ``torch.jit.load`` work as they do with a real traced module.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from sdk_double_common import compile_graph, recorded

SDK_DOUBLE = True
__version__ = "2.8.0.2.10.16998"
calls: list[dict[str, Any]] = []


@recorded("torch-neuronx", "torch_neuronx.trace")
def trace(
    func: Any,
    example_inputs: Any,
    *_: Any,
    input_output_aliases: dict[Any, Any] = {},  # noqa: B006 - the documented default
    compiler_workdir: str | None = None,
    compiler_args: str | list[str] | None = None,
    partitioner_config: Any = None,
    inline_weights_to_neff: bool = True,
    cpu_backend: bool = False,
) -> Any:
    import torch

    if _:
        raise TypeError("trace(): positional arguments after example_inputs are deprecated; use keywords")
    flags = shlex.split(compiler_args) if isinstance(compiler_args, str) else list(compiler_args or [])
    if cpu_backend and not any(f.startswith("--target") for f in flags):
        raise ValueError("cpu_backend=True needs --target in compiler_args")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("example_inputs must be tensors")
    shape = "x".join("x".join(map(str, t.shape)) for t in inputs)
    workdir = Path(compiler_workdir) if compiler_workdir else Path.cwd() / "torch_neuronx_double"
    compile_graph(workdir, f"trace-{shape}", flags)
    calls.append({"shapes": [list(t.shape) for t in inputs], "compiler_args": flags, "cpu_backend": cpu_backend})
    with torch.no_grad():
        return torch.jit.trace(func, inputs, strict=False)
