"""The embedded default backend: torch.export + AOTInductor on CPU."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar

from neuronc.backends.base import BackendBase


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


class InductorBackend(BackendBase):
    name: ClassVar[str] = "inductor"
    description: ClassVar[str] = "embedded CPU backend: torch.export + AOTInductor, one graph per bucket"
    targets: ClassVar[frozenset[str]] = frozenset({"cpu"})
    amp: ClassVar[frozenset[str]] = frozenset({"fp32", "bf16"})
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded"})
    packages: ClassVar[tuple[str, ...]] = ("torch", "transformers", "safetensors")
    required: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    install_hint: ClassVar[str | None] = "pip install torch==2.13.0 && pip install 'neuronc[cpu]'"

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        return frozenset({1})

    def toolchain_versions(self) -> dict[str, str | None]:
        versions = super().toolchain_versions()
        versions["cpu_isa"] = cpu_isa()
        return versions
