"""Load an inductor bundle into a runner: check the toolchain, load the packages, bind the weights.

Safety rails (docs/inductor.md):

- every constant a compiled graph asks for (``get_constant_fqns()``, non-persistent buffers such
  as rotary ``inv_freq`` included) is checked for presence, shape and dtype *before* it is bound:
  an unbound constant makes the first call segfault;
- ``AOTI_RUNTIME_CHECK_INPUTS=1`` is set before the packages load, so AOTInductor itself rejects
  wrong shapes and dtypes as well;
- packages are tied to the torch build and the CPU ISA they were compiled with: both are checked.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN
from neuronc.backends.inductor.aoti import load_package
from neuronc.backends.inductor.format import GRAPH_FORMAT, INDEX_NAME, cpu_isa, isa_runs_here, weight_files
from neuronc.backends.inductor.runner import DTYPES, InductorRunner, LoadedGraph
from neuronc.errors import BundleFormatError, EnvironmentIncompatibleError, VerificationError
from neuronc.model.files import read_model_config


def read_index(bundle_dir: Path) -> dict[str, Any]:
    path = bundle_dir / "artifacts" / INDEX_NAME
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleFormatError(f"{bundle_dir}: not an inductor bundle (no artifacts/{INDEX_NAME})") from None
    except (OSError, ValueError) as exc:
        raise BundleFormatError(f"{path}: unreadable: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != GRAPH_FORMAT:
        found = index.get("format") if isinstance(index, dict) else None
        msg = f"{path}: graph format {found!r}; this neuronc reads format {GRAPH_FORMAT}"
        raise BundleFormatError(msg, hint="recompile the profile with this neuronc")
    return index


def check_toolchain(index: Mapping[str, Any]) -> None:
    """Packages are tied to the torch build and the CPU ISA they were compiled for."""
    built = index.get("toolchain") or {}
    built_torch = built.get("torch")
    if built_torch and built_torch != torch.__version__:
        msg = f"the bundle was compiled with torch {built_torch}; this environment has torch {torch.__version__}"
        raise EnvironmentIncompatibleError(msg, hint=f"install torch=={built_torch}, or recompile the profile here")
    built_isa = built.get("cpu_isa")
    if built_isa and not isa_runs_here(str(built_isa)):
        msg = f"the bundle was compiled for CPU ISA {built_isa}; this CPU supports {cpu_isa()}"
        raise EnvironmentIncompatibleError(msg, hint="recompile the profile on this machine")


def load_weights(bundle_dir: Path) -> dict[str, Any]:
    """The bundle's weights (tp=1: one rank shard holding the full state dict), by checkpoint key."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = weight_files(bundle_dir / "weights") if (bundle_dir / "weights").is_dir() else []
    if not files:
        raise BundleFormatError(f"{bundle_dir}: no weights/*.safetensors in the bundle")
    state: dict[str, Any] = {}
    for path in files:
        try:
            state.update(load_file(str(path)))
        except (OSError, SafetensorError) as exc:
            raise VerificationError(f"{path}: cannot read weights: {exc}") from None
    return state


def bind_constants(
    graph_name: str,
    fqns: Sequence[str],
    meta: Mapping[str, Any],
    weights: dict[str, Any],
    owned: Mapping[str, Any],
    shared: dict[str, Any],
) -> dict[str, Any]:
    """Map every FQN a compiled graph needs to a tensor; raise listing all that are missing or wrong.

    ``shared`` collects the tensors handed out (by checkpoint key, or ``owned:<fqn>``), so all graphs
    bind the same tensor objects: one copy of the weights.
    """
    recorded = meta.get("constants", {})
    bound: dict[str, Any] = {}
    problems: list[str] = []
    for fqn in fqns:
        info = recorded.get(fqn)
        if info is None:
            problems.append(f"{fqn}: the compiled graph needs it but its metadata does not list it")
            continue
        expected_dtype = DTYPES.get(info["dtype"])
        if info.get("graph_owned"):
            slot = f"owned:{fqn}"
            tensor = owned.get(fqn)
            source = f"{graph_name}.constants.safetensors"
        else:
            key = next((k for k in info["keys"] if k in weights), None)
            slot = key or ""
            tensor = weights.get(key) if key is not None else None
            source = "weights"
        if tensor is None:
            problems.append(f"{fqn}: not in the bundle's {source} (looked for {', '.join(info.get('keys', [fqn]))})")
            continue
        if list(tensor.shape) != list(info["shape"]):
            problems.append(f"{fqn}: shape {list(tensor.shape)} in {source}, the graph expects {info['shape']}")
            continue
        existing = shared.get(slot)
        if existing is not None and existing.dtype == expected_dtype:
            # Same checkpoint key: the same tensor. Graph-owned values are shared only when equal.
            if not info.get("graph_owned") or torch.equal(existing, tensor.to(expected_dtype)):
                bound[fqn] = existing
                continue
            slot = f"owned:{graph_name}:{fqn}"
        if tensor.dtype != expected_dtype:
            tensor = tensor.to(expected_dtype)
        shared[slot] = tensor.contiguous()
        bound[fqn] = shared[slot]
    if problems:
        msg = f"graph {graph_name}: {len(problems)} constant(s) cannot be bound; refusing to run it"
        raise VerificationError(msg, details=problems[:40], hint="the bundle is incomplete or damaged; recompile it")
    return bound


def load(
    bundle_dir: str | os.PathLike[str],
    *,
    warmup: bool = True,
    package_loader: Callable[[Path], Any] = load_package,
) -> InductorRunner:
    """Load an inductor bundle: check toolchain, load packages, bind constants, warm every graph up.

    ``package_loader`` loads one graph's ``.pt2``: by default without importing ``torch._inductor``
    (``inductor.aoti``); ``aoti.public_load_package`` is torch's public loader.
    """
    started = time.perf_counter()
    root = Path(bundle_dir)
    if not root.is_dir():
        raise BundleFormatError(f"{root}: no such bundle directory")
    index = read_index(root)
    check_toolchain(index)
    # Must be set before the packages load: AOTInductor then rejects wrong shapes and dtypes itself.
    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    artifacts = root / "artifacts"
    weights = load_weights(root)
    shared: dict[str, Any] = {}
    graphs: list[LoadedGraph] = []
    for entry in index.get("graphs", []):
        name = str(entry["name"])
        try:
            meta = json.loads((artifacts / entry["meta"]).read_text(encoding="utf-8"))
            owned = load_file(str(artifacts / entry["constants"]))
        except (OSError, ValueError, SafetensorError) as exc:
            raise BundleFormatError(f"{artifacts}: graph {name} is incomplete: {exc}") from None
        package = artifacts / entry["package"]
        if not package.is_file():
            raise BundleFormatError(f"{package}: missing")
        model = package_loader(package)
        fqns = sorted(model.get_constant_fqns())
        bound = bind_constants(name, fqns, meta, weights, owned, shared)
        model.load_constants(bound, check_full_update=True, user_managed=True)
        graphs.append(
            LoadedGraph(
                name=name,
                role=str(entry["role"]),
                batch=int(entry["batch"]),
                bucket=int(entry["bucket"]),
                inputs=list(meta["inputs"]),
                output=dict(meta["output"]),
                model=model,
            )
        )
    del weights  # what the graphs use lives on in `shared`
    model_config = read_model_config(root / "model", required=False) or {}
    runner = InductorRunner(root, index, graphs, shared, model_config, eos_token_ids(root / "model"), 0.0)
    if warmup:
        runner.warmup()
    runner.load_seconds = time.perf_counter() - started
    return runner


def reference_model(bundle_dir: Path, dtype_name: str) -> Any:
    """The HF eager model from the bundle's model/config.json and weights/, in the bundle's dtype."""
    from neuronc.backends.inductor import graphs

    config = graphs.load_config(bundle_dir / "model")
    model = graphs.build_model(config, graphs.DTYPES[dtype_name])
    state = load_weights(bundle_dir)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        details = [f"missing: {k}" for k in missing[:20]] + [f"unexpected: {k}" for k in unexpected[:20]]
        raise VerificationError(f"{bundle_dir}: the weights do not match the model config", details=details)
    if tied:
        model.tie_weights()
    return model


def eos_token_ids(model_dir: Path) -> frozenset[int]:
    """The end-of-sequence ids from generation_config.json, else config.json (empty when neither says)."""
    sources = [_generation_config(model_dir), read_model_config(model_dir, required=False) or {}]
    for data in sources:
        value = data.get("eos_token_id")
        if isinstance(value, int):
            return frozenset({value})
        if isinstance(value, list) and value:
            return frozenset(int(v) for v in value)
    return frozenset()


def _generation_config(model_dir: Path) -> dict[str, Any]:
    from neuronc.jsonfile import read_json_object

    try:
        return read_json_object(model_dir / "generation_config.json", what="generation_config.json")
    except FileNotFoundError:
        return {}


def eager_runner(
    model_dir: str | os.PathLike[str],
    *,
    dtype: str = "float32",
    batch_size: int = 1,
    context_buckets: Sequence[int] = (32,),
    token_buckets: Sequence[int] = (128,),
    max_length: int = 128,
    state_dict: Mapping[str, Any] | None = None,
) -> InductorRunner:
    """A runner over the *eager* CTE/TKG wrappers of an HF checkpoint: same loop, no compile.

    The wrappers are what the compiled graphs are exported from, so this is a fast way to test the
    runtime loop and the wrappers against Hugging Face (tests, debugging). Weights come from
    ``state_dict`` or the checkpoint's safetensors.
    """
    from safetensors.torch import load_file

    from neuronc.backends.inductor import graphs

    root = Path(model_dir)
    config = graphs.load_config(root)
    model = graphs.build_model(config, DTYPES[dtype])
    if state_dict is None:
        state: dict[str, Any] = {}
        for path in weight_files(root):
            state.update(load_file(str(path)))
    else:
        state = dict(state_dict)
    model.load_state_dict(state, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    loaded = []
    for role, buckets in ((ROLE_CONTEXT, context_buckets), (ROLE_TOKEN, token_buckets)):
        for bucket in buckets:
            wrapper = graphs.wrapper_for(model, role, bucket)
            specs = graphs.input_specs(config, role, batch_size, bucket, max_length, DTYPES[dtype])
            output = {"shape": [batch_size, config.vocab_size], "dtype": "float32"}
            loaded.append(LoadedGraph(f"eager-{role}-{bucket}", role, batch_size, bucket, specs, output, wrapper))
    index = {"dtype": dtype, "batch_size": batch_size, "max_length": max_length, "format": GRAPH_FORMAT}
    return InductorRunner(root, index, loaded, {}, config.to_dict(), eos_token_ids(root), 0.0, model_dir=root)
