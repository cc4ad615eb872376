"""The inductor bundle format, shared by the backend, its compile worker and its runtime (no torch).

What every side must agree on: the format number, the index file, the model types the wrappers
support, the files of one compiled graph, the CPU ISA a package is tied to, and which constants a
graph needs from the weights. Nothing here imports the backend, the graphs or the runtime, so those
three modules import this one and never each other in a circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Bump when the wrappers, the graph calling convention or the artifact layout change: it is part of
# every graph cache key and of artifacts/inductor.json.
GRAPH_FORMAT = 2
INDEX_NAME = "inductor.json"
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
_ISA_ORDER = ("default", "avx2", "avx512", "avx512_vnni")


# Loading a package, torch compiles and dlopens test programs to find the CPU's vector ISA, only to
# compare it with the one the package records (``torch/export/pt2_archive/_package.py`` ``_load_aoti``
# -> ``torch/_inductor/codecache.py`` ``get_device_information`` -> ``cpu_vec_isa.pick_vec_isa``);
# the public loader has no argument to skip it. The bundle records its ISA (toolchain.cpu_isa) and
# the runtime checks it against /proc/cpuinfo before loading (``runtime.check_toolchain``), so a
# process that only loads graphs can let torch take the CPU's flags as they are:
# ``torch._inductor.config.cpp.vec_isa_ok``, "If None, autodetect whether or not AVX512/AVX2 can be
# used. Otherwise, force usage as specified, without testing", read from this variable when torch's
# inductor is first imported. It changes no compiled code: torch only logs a mismatch on load.
TRUST_CPU_FLAGS_ENV = {"TORCHINDUCTOR_VEC_ISA_OK": "1"}


def graph_files(name: str) -> tuple[str, str, str]:
    """The files of one compiled graph: package, metadata, graph-owned constants."""
    return f"{name}.pt2", f"{name}.json", f"{name}.constants.safetensors"


def cpu_isa() -> str:
    """The vector ISA AOTInductor will target, read from /proc/cpuinfo (no torch import).

    Mirrors torch's CPU capability choice: avx512 needs avx512f/bw/vl/dq, avx2 needs avx2+fma.
    """
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx512_vnni" if "avx512_vnni" in flags else "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "default"


def isa_runs_here(compiled_isa: str, here: str | None = None) -> bool:
    """Whether code compiled for ``compiled_isa`` can run on this CPU (x86 ISAs are ordered)."""
    here = cpu_isa() if here is None else here
    if compiled_isa == here:
        return True
    if compiled_isa in _ISA_ORDER and here in _ISA_ORDER:
        return _ISA_ORDER.index(compiled_isa) <= _ISA_ORDER.index(here)
    return False


def weight_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.safetensors") if p.is_file())


def weight_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors header (validated; CheckpointError when damaged)."""
    from neuronc.checkpoint import read_safetensors_header

    return {entry.name: list(entry.shape) for entry in read_safetensors_header(path).entries}


def missing_constants(graph_meta: Mapping[str, Any], shapes: Mapping[str, list[int]]) -> list[str]:
    """Constants of a graph that no weight can supply (by key and shape); graph-owned ones excluded."""
    problems = []
    for fqn, info in sorted(graph_meta.get("constants", {}).items()):
        if info.get("graph_owned"):
            continue
        found = [shapes[k] for k in info.get("keys", []) if k in shapes]
        if not found:
            problems.append(f"{fqn}: no weight named {' or '.join(info.get('keys', []))}")
        elif list(found[0]) != list(info.get("shape", [])):
            problems.append(f"{fqn}: weight has shape {found[0]}, the graph expects {info.get('shape')}")
    return problems
