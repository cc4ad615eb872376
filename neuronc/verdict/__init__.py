"""The pre-boot verdict: will this bundle start in that image (or on this host) with zero compiles?

A serving stack reuses a compiled graph only when every part of its key is the same where it was
compiled and where it is served. The parts, per backend:

- vllm-neuron: the plugin keys each graph on neuronx-cc, NKI and the libtorch-neuronx-lite
  (torch_neuronx) versions, the compiler arguments with the platform target, the replica groups (tp,
  LNC) and the traced graph with its input shapes (vllm-neuron compilation_cache.md; the KV cache
  shape is one of them, design/vllm/determine_available_memory_design.md); torch traces the graph.
  So: ``neuronx-cc``, ``nki``, ``libtorch-neuronx-lite``, ``torch`` (the image's versions), ``target``
  (the image's targets), and what the serve lines neuronc writes give the engine: ``tp``, ``lnc``,
  ``route`` (``VLLM_NEURON_BACKEND``), ``kv_blocks`` (``--num-gpu-blocks-override``), ``engine_args``
  and ``environment`` (the compile's ``VLLM_NEURON_*``/``NEURON_*`` variables against the serving side's,
  the image's or this host's own included).
- nxdi: ``neuronx-cc``, ``neuronx-distributed-inference``, ``torch-neuronx`` (NxDI's model.pt is
  TorchScript traced with them), ``tp`` and ``buckets`` (the NeuronConfig NxDI loads).
- optimum-neuron: ``optimum-neuron`` and ``neuronx-cc``, on their public versions, as optimum-neuron
  compares them before it loads an export (``optimum/neuron/configuration_utils.py``).

Each part is ``(field, bundle's value, serving side's value)``; the bundle starts with zero compiles
when none differs. A part the serving side cannot tell (an image's environment the support matrix does
not record, this host's target) is listed as unchecked, never as a match. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from neuronc.backends.support import public
from neuronc.errors import EnvironmentIncompatibleError, InvalidInputError
from neuronc.jsonfile import JsonFields
from neuronc.verdict.side import ServingSide

BACKENDS = ("vllm-neuron", "nxdi", "optimum-neuron")
VLLM_NEURON_VERSIONS = ("neuronx-cc", "nki", "libtorch-neuronx-lite", "torch")
NXDI_VERSIONS = ("neuronx-cc", "neuronx-distributed-inference", "torch-neuronx")
OPTIMUM_VERSIONS = ("optimum-neuron", "neuronx-cc")
UNKNOWN = "unknown"
NOT_RECORDED = "not recorded"


class PartJSON(TypedDict):
    field: str
    bundle: str
    image: str
    checked: bool


class DifferenceJSON(TypedDict):
    field: str
    bundle: str
    image: str


class VerdictJSON(TypedDict):
    """``Verdict.to_json()``: what ``--against-image`` and ``deploy``'s ``verdict`` report."""

    image: str
    source: str
    backend: str
    starts_without_compiling: bool
    differences: list[DifferenceJSON]
    unchecked: list[str]
    parts: list[PartJSON]


@dataclass(frozen=True)
class Part(JsonFields):
    field: str
    bundle: str
    image: str
    checked: bool = True

    @property
    def differs(self) -> bool:
        return self.checked and self.bundle != self.image

    def to_json(self) -> PartJSON:  # type: ignore[override]  # the same fields, typed
        return cast("PartJSON", super().to_json())


@dataclass(frozen=True)
class Verdict:
    backend: str
    side: ServingSide
    parts: tuple[Part, ...] = field(default_factory=tuple)

    @property
    def differences(self) -> list[Part]:
        return [p for p in self.parts if p.differs]

    @property
    def starts_without_compiling(self) -> bool:
        return not self.differences

    def lines(self) -> list[str]:
        return [f"{p.field}: bundle {p.bundle}, image {p.image}" for p in self.differences]

    def to_json(self) -> VerdictJSON:
        return {
            "image": self.side.name,
            "source": self.side.source,
            "backend": self.backend,
            "starts_without_compiling": self.starts_without_compiling,
            "differences": [{"field": p.field, "bundle": p.bundle, "image": p.image} for p in self.differences],
            "unchecked": [p.field for p in self.parts if not p.checked],
            "parts": [p.to_json() for p in self.parts],
        }

    def error(self, what: str) -> EnvironmentIncompatibleError:
        """Exit 5, every differing part named."""
        msg = f"{what}: would not start with zero compiles in {self.side.name} ({len(self.differences)} part(s) differ)"
        hint = "serve it in the image it was compiled for (or rebuild it for this image)"
        return EnvironmentIncompatibleError(msg, details=self.lines(), hint=hint)


def _text(value: object) -> str:
    if value is None:
        return NOT_RECORDED
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def _version_parts(
    packages: Sequence[str], toolchain: Mapping[str, str | None], side: ServingSide, *, both_only: Sequence[str] = ()
) -> list[Part]:
    parts = []
    for package in packages:
        mine, theirs = public(toolchain.get(package)), public(side.versions.get(package))
        if (package in both_only and (mine is None or theirs is None)) or (theirs is None and side.pins_only):
            parts.append(Part(package, mine or NOT_RECORDED, theirs or NOT_RECORDED, checked=False))
            continue
        parts.append(Part(package, mine or "none", theirs or "none"))
    return parts


def _flag(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag value`` / ``--flag=value`` in ``args`` (the last one, as argparse takes it)."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


# Engine arguments that are parts of their own (tp, kv_blocks): left out of the ``engine_args`` part.
OWN_FLAGS = ("--tensor-parallel-size", "--num-gpu-blocks-override")


def _without(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif arg.split("=", 1)[0] not in flags:
            kept.append(arg)
    return kept


def _env_text(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"


def vllm_neuron_parts(values: Any, info: Mapping[str, Any], side: ServingSide) -> list[Part]:
    """The plugin's key parts: the bundle's against what the serve lines give the engine in ``side``."""
    from neuronc.backends.vllm_neuron.build import PLACEMENT_ENV
    from neuronc.backends.vllm_neuron.engine import engine_cli
    from neuronc.backends.vllm_neuron.facts import FAIL_ON_MISS_ENV, RECORDED_ENV_PREFIXES, plugin_env
    from neuronc.deploy.vllm_neuron import record_of, serve_env
    from neuronc.hardware import lnc

    record = record_of(values)
    # The versions the compile had where it ran (read there), over the toolchain key's: a DLC's torch,
    # for one, is recorded by the compile but not pinned by the matrix row the toolchain comes from.
    ran = info.get("versions_in_runner")
    had = {str(k): str(v) for k, v in dict(ran).items() if isinstance(v, str)} if isinstance(ran, Mapping) else {}
    parts = _version_parts(VLLM_NEURON_VERSIONS, {**values.toolchain, **had}, side)
    target = record.target or NOT_RECORDED
    if side.targets is None:
        parts.append(Part("target", target, UNKNOWN, checked=False))
    else:
        parts.append(Part("target", target, target if target in side.targets else ",".join(side.targets) or "none"))
    served = serve_env(record)
    args = list(record.engine_args)
    parts.append(Part("tp", str(values.tp_degree), _flag(args, "--tensor-parallel-size") or NOT_RECORDED))
    parts.append(Part("lnc", str(lnc(values.target, values.options)), served.get("NEURON_LOGICAL_NC_CONFIG", "2")))
    parts.append(Part("route", _text(record.route), served["VLLM_NEURON_BACKEND"]))
    parts.append(Part("kv_blocks", _text(record.num_gpu_blocks), _flag(args, "--num-gpu-blocks-override") or "sized"))
    kwargs = info.get("engine_kwargs")
    compiled = _without(engine_cli(kwargs), OWN_FLAGS) if isinstance(kwargs, Mapping) else None
    parts.append(Part("engine_args", _text(compiled), _text(_without(args, OWN_FLAGS))))
    # The environment the server sees: the serving side's own, then the serve lines' (which win), less
    # what the serve lines set by design (route, LNC, the switches: parts of their own above).
    own = {"VLLM_NEURON_BACKEND", "NEURON_LOGICAL_NC_CONFIG", FAIL_ON_MISS_ENV, *PLACEMENT_ENV}
    own.add(plugin_env(record.plugin).disable_graph_capture)
    recorded = {k: v for k, v in {**record.kv_sizing_env, **record.compile_env}.items() if k not in own}
    if side.env is None:
        parts.append(Part("environment", _env_text(recorded), UNKNOWN, checked=False))
    else:
        seen = {k: v for k, v in {**side.env, **served}.items() if k.startswith(RECORDED_ENV_PREFIXES)}
        parts.append(
            Part("environment", _env_text(recorded), _env_text({k: v for k, v in seen.items() if k not in own}))
        )
    return parts


def nxdi_parts(values: Any, side: ServingSide) -> list[Part]:
    parts = _version_parts(NXDI_VERSIONS, values.toolchain, side, both_only=("torch-neuronx",))
    config = dict(values.nxdi.neuron_config) if values.nxdi is not None else {}
    tp = config.get("tp_degree")
    parts.append(Part("tp", str(values.tp_degree), _text(tp), checked=tp is not None))
    loaded = config.get("context_encoding_buckets")
    if isinstance(loaded, list):
        parts.append(Part("buckets", _text(values.context_buckets), _text(loaded)))
    else:  # no bucketing: one context graph of max_context_length, nothing recorded to compare
        parts.append(Part("buckets", _text(values.context_buckets), NOT_RECORDED, checked=False))
    return parts


def bundle_verdict(bundle: Path, side: ServingSide) -> Verdict:
    """The verdict for the bundle at ``bundle`` against ``side`` (InvalidInputError for other backends)."""
    from neuronc.bundle import read_manifest
    from neuronc.deploy import serving_values

    manifest = read_manifest(bundle)
    if manifest.backend not in BACKENDS:
        msg = f"the {manifest.backend} backend's bundles have no serving-stack key neuronc compares"
        raise InvalidInputError(msg, hint=f"the verdict covers {', '.join(BACKENDS)} bundles")
    values = serving_values(manifest, bundle)
    if manifest.backend == "vllm-neuron":
        info = manifest.extra.get("vllm_neuron")
        parts = vllm_neuron_parts(values, info if isinstance(info, Mapping) else {}, side)
    elif manifest.backend == "nxdi":
        parts = nxdi_parts(values, side)
    else:
        parts = _version_parts(OPTIMUM_VERSIONS, values.toolchain, side)
    return Verdict(manifest.backend, side, tuple(parts))


def image_verdict(bundle: Path, reference: str) -> Verdict:
    """The verdict against an image: its versions from the support matrix, else from the image itself."""
    from neuronc.verdict.image import image_side

    return bundle_verdict(bundle, image_side(reference, bundle))


def host_verdict(bundle: Path) -> Verdict:
    """The verdict against this host: the installed versions and this environment's variables."""
    import os

    from neuronc.backends import resolve_backend
    from neuronc.bundle import read_manifest
    from neuronc.verdict.image import neuron_env

    # A bundle read from disk names its backend: resolved here, once.
    manifest = read_manifest(bundle)
    try:
        installed = resolve_backend(manifest).toolchain_versions()
    except ImportError:
        installed = {}
    side = ServingSide("this host", "installed versions and this environment", installed, None, neuron_env(os.environ))
    return bundle_verdict(bundle, side)


def has_verdict(backend: str) -> bool:
    return backend in BACKENDS


__all__ = [
    "BACKENDS",
    "DifferenceJSON",
    "Part",
    "PartJSON",
    "ServingSide",
    "Verdict",
    "VerdictJSON",
    "bundle_verdict",
    "has_verdict",
    "host_verdict",
    "image_verdict",
    "nxdi_parts",
    "vllm_neuron_parts",
]
