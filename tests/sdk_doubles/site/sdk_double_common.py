"""Shared helpers of the SDK test doubles (not part of any real SDK).

``recorded(package, qualname)`` binds every call of a double against the signature recorded from
the upstream source (tests/fixtures/sdk_signatures, read by tests/sdk_signatures.py) for the Neuron
SDK release neuronc targets: an argument the real API would refuse (an unknown keyword, an unknown
config field, a method the class does not have at that release) is a TypeError or AttributeError
here too, so a double cannot accept what the real SDK would not.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

SDK_DOUBLE = True
FAIL_ENV = "NEURONC_SDK_DOUBLE_FAIL"
_TESTS = Path(__file__).resolve().parents[2]
F = TypeVar("F", bound=Callable[..., Any])
# (package, qualname, function) of every double bound to a record; "{cls}" stands for the class called.
RECORDED: list[tuple[str, str, Callable[..., Any]]] = []


@functools.cache
def signatures() -> ModuleType:
    """tests/sdk_signatures.py, loaded by path: the doubles also run in child processes."""
    spec = importlib.util.spec_from_file_location("sdk_signatures", _TESTS / "sdk_signatures.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.get("sdk_signatures") or importlib.util.module_from_spec(spec)
    if "sdk_signatures" not in sys.modules:
        sys.modules["sdk_signatures"] = module
        spec.loader.exec_module(module)
    return module


def check_call(package: str, qualname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise as the real API would for these arguments (strict recorded signature)."""
    sigs = signatures()
    record = sigs.load_record(package)
    if qualname in record["missing"]:
        raise AttributeError(f"{qualname} does not exist in {package} {record['ref']}: {record['missing'][qualname]}")
    try:
        sigs.signature_of(record, qualname).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{qualname} ({package} {record['ref']}): {exc}") from None


def recorded(package: str, qualname: str, *, method: bool = False) -> Callable[[F], F]:
    """Bind each call against ``qualname``'s recorded signature (``method``: skip self/cls).

    ``{cls}`` in ``qualname`` is the name of the class the method is called on, so one double
    method serves several recorded classes.
    """

    def wrap(func: F) -> F:
        RECORDED.append((package, qualname, func))

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            name = qualname
            if "{cls}" in name:
                owner = args[0] if isinstance(args[0], type) else type(args[0])
                name = name.format(cls=owner.__name__)
            check_call(package, name, args[1:] if method else args, kwargs)
            return func(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def compile_graph(workdir: Path, name: str, flags: list[str]) -> bytes:
    """Stand in for one neuronx-cc run: write its log and a fake NEFF; fail when asked to."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "log-neuron-cc.txt"
    lines = [f"neuronx-cc (SDK double) compile {name}", f"flags: {' '.join(flags)}"]
    if os.environ.get(FAIL_ENV):
        lines.append(f"ERROR: {os.environ[FAIL_ENV]}")
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(lines), file=sys.stderr, flush=True)
        raise RuntimeError(f"neuronx-cc failed (SDK double): {os.environ[FAIL_ENV]}")
    lines.append("Compiler status PASS")
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(lines[0], flush=True)
    neff = b"NEFF-SDK-DOUBLE\0" + hashlib.sha256((name + " ".join(flags)).encode()).digest()
    (workdir / "graph.neff").write_bytes(neff)
    return neff


def save_torchscript(path: Path, payload: dict[str, Any]) -> None:
    """Write a small TorchScript module (as model.pt files are) that carries ``payload`` as JSON."""
    import torch

    class _Compiled(torch.nn.Module):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.info = text

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(_Compiled(json.dumps(payload, sort_keys=True))), str(path))


def load_safetensors_dir(path: Path) -> dict[str, Any]:
    """All tensors of a checkpoint directory (tests use tiny checkpoints)."""
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors checkpoint in {path}")
    tensors: dict[str, Any] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def shard_to(tensors: dict[str, Any], tp: int, out_dir: Path, name: str) -> None:
    """Write one safetensors file per rank, splitting dim 0 where it divides, replicating otherwise."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(tp):
        shard = {}
        for key, t in tensors.items():
            if t.dim() and t.shape[0] % tp == 0:
                shard[key] = t.chunk(tp, dim=0)[rank].contiguous()
            else:
                shard[key] = t.contiguous()
        save_file(shard, str(out_dir / name.format(rank=rank)))
