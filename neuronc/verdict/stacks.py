"""The key parts of each serving stack, the bundle's against the serving side's (neuronc.verdict).

- vllm-neuron: the plugin keys each graph on the traced FX graph (the plugin's and vLLM's model code,
  traced by torch: "different model code producing a different FX graph" is a documented recompile
  trigger, guides/reference-configuration.md), its input shapes, the neuronx-cc, NKI and
  libtorch-neuronx-lite versions, the compiler arguments with the platform target and the replica
  groups (compilation_cache.md). Compared: ``neuronx-cc``, ``nki``, ``libtorch-neuronx-lite``,
  ``torch``, ``vllm-neuron``, ``vllm``, ``target`` and ``environment`` (graph-shaping variables the
  serving side sets that the serve files do not); the route when the serve files leave it unset.
  Pinned by the serve files: ``tp``, ``lnc``, ``kv_blocks``, ``engine_args`` and a recorded ``route``.
  A warning, not a part: another Python recompiles the NKI kernels (their cache is keyed on the full
  Python version, 0.21 fork ``nki/nki_cache.py``).
- nxdi: ``neuronx-cc``, ``neuronx-distributed-inference``, ``torch-neuronx`` (NxDI's model.pt is
  TorchScript traced with them) and ``target``; pinned: ``tp`` and ``buckets`` (the NeuronConfig in
  the bundle, which NxDI loads).
- optimum-neuron: ``optimum-neuron`` and ``neuronx-cc`` as exact strings, as optimum-neuron compares
  them before it loads an export (``configuration_utils.py``, ``from_dict``), and ``target`` (it
  refuses a model "compiled for ... but the current instance type is ...",
  ``pretrained_model.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from neuronc.backends.support import public
from neuronc.errors import BundleFormatError, safe_text
from neuronc.verdict.parts import NOT_RECORDED, UNKNOWN, Part, compare, env_text, pinned, text, unchecked
from neuronc.verdict.side import ServingSide

VLLM_NEURON_VERSIONS = ("neuronx-cc", "nki", "libtorch-neuronx-lite", "torch", "vllm-neuron", "vllm")
NXDI_VERSIONS = ("neuronx-cc", "neuronx-distributed-inference", "torch-neuronx")
OPTIMUM_VERSIONS = ("optimum-neuron", "neuronx-cc")
_RECOMPILE = "recompile the bundle with this neuronc (it records what the compile read)"


def _refuse(field: str, value: object, why: str) -> BundleFormatError:
    msg = f"manifest.json: extra.vllm_neuron.{field} {why} (got {safe_text(repr(value), 80)})"
    return BundleFormatError(msg, hint="the manifest was edited or written by another tool: recompile the bundle")


def recorded_versions(info: Mapping[str, Any]) -> dict[str, str | None]:
    """``versions_in_runner``: distribution name -> version (BundleFormatError, exit 2, if ill-typed)."""
    found = info.get("versions_in_runner")
    if found is None:
        return {}
    if not isinstance(found, Mapping) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in found.items()
    ):
        raise _refuse("versions_in_runner", found, "is not a mapping of package names to versions")
    return dict(found)


def recorded_python(info: Mapping[str, Any]) -> str | None:
    value = info.get("python")
    if value is not None and (not isinstance(value, str) or len(value) > 32):
        raise _refuse("python", value, "is not a Python version")
    return value


def _how(side: ServingSide) -> str:
    return side.how or "read the serving side itself"


def _torch_of_lite(lite: str | None) -> str | None:
    """The torch release a libtorch-neuronx-lite build is for: its first three numbers
    (``2.11.0.1.0.1284`` is built against torch 2.11.0) [inferred from the naming]."""
    try:
        release = Version(lite).release if lite else ()
    except InvalidVersion:
        return None
    return ".".join(map(str, release[:3])) if len(release) >= 3 else None


def _release3(version: str) -> str:
    try:
        return ".".join(map(str, Version(version).release[:3]))
    except InvalidVersion:
        return version


def version_parts(packages: tuple[str, ...], mine: Mapping[str, str | None], side: ServingSide) -> list[Part]:
    """Each package's public version, the bundle's against the serving side's."""
    parts = []
    for package in packages:
        ours, theirs = public(mine.get(package)), public(side.versions.get(package))
        if package == "torch" and theirs is None and side.pins_only:
            derived = _torch_of_lite(public(side.versions.get("libtorch-neuronx-lite")))
            if ours is not None and derived is not None:
                lite = side.versions["libtorch-neuronx-lite"]
                note = f"torch {derived}: the release libtorch-neuronx-lite {lite} is built for"
                parts.append(compare(package, _release3(ours), derived, note))
                continue
        if ours is None:
            parts.append(unchecked(package, NOT_RECORDED, theirs or UNKNOWN, f"the bundle records none: {_RECOMPILE}"))
        elif theirs is None and side.pins_only:
            why = f"{side.source} records no {package} for it: {_how(side)}"
            parts.append(unchecked(package, ours, UNKNOWN, why))
        else:
            parts.append(compare(package, ours, theirs or "none"))
    return parts


def target_part(target: str | None, side: ServingSide, backend: str) -> Part:
    """The bundle's target against the ones the serving side runs on."""
    from neuronc.backends.support import find_release

    if target is None:
        return unchecked("target", NOT_RECORDED, UNKNOWN, f"the bundle records none: {_RECOMPILE}")
    targets, note = side.targets, ""
    release = find_release(side.release) if targets is None and side.release else None
    entry = release.backends.get(backend) if release is not None else None
    if release is not None and entry is not None:
        targets, note = entry.targets, f"the targets Neuron SDK {release.version} supports for {backend}"
    if targets is None:
        why = f"{side.name} does not say which chip serves it: serve it on a {target} instance"
        return unchecked("target", target, UNKNOWN, why)
    return compare("target", target, target if target in targets else ",".join(targets) or "none", note)


def python_warning(compiled: str | None, side: ServingSide) -> list[str]:
    if compiled is None or side.python is None or compiled == side.python:
        return []
    return [
        f"Python {side.python} in {side.name}, {compiled} where it compiled: the NKI kernel cache is keyed on "
        "the Python version, so NKI kernels recompile (front end only) even when every graph hits"
    ]


def vllm_neuron_parts(values: Any, info: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]:
    """The plugin's key parts (and the warnings): the bundle's against what ``side`` gives the engine
    under the serve files ``neuronc deploy`` writes."""
    from neuronc.backends.vllm_neuron.facts import ROUTE_ENV, shapes_graphs
    from neuronc.deploy.vllm_neuron import record_of, serve_env

    record = record_of(values)
    # The versions the compile had where it ran (read there), over the toolchain key's: a DLC's torch,
    # for one, is recorded by the compile but not pinned by the matrix row the toolchain comes from.
    mine: dict[str, str | None] = {**values.toolchain, **recorded_versions(info)}
    mine.setdefault("vllm-neuron", record.plugin)
    mine.setdefault("vllm", record.vllm)
    parts = version_parts(VLLM_NEURON_VERSIONS, mine, side)
    parts.append(target_part(record.target, side, "vllm-neuron"))
    served = serve_env(record)
    args = list(record.engine_args)
    parts.append(pinned("tp", str(values.tp_degree)))
    parts.append(pinned("lnc", str(record.logical_nc_config)))
    if record.route:
        parts.append(pinned("route", record.route))
    elif side.env is None and not side.compiled_here:
        why = f"the serve files leave {ROUTE_ENV} unset; {side.name}'s own value is not known: {_how(side)}"
        parts.append(unchecked("route", "unset", UNKNOWN, why))
    else:
        parts.append(
            compare("route", "unset", "unset" if side.compiled_here else (side.env or {}).get(ROUTE_ENV, "unset"))
        )
    if record.num_gpu_blocks is None:
        why = f"the bundle records no KV block count, so the server sizes its own: {_RECOMPILE}"
        parts.append(unchecked("kv_blocks", NOT_RECORDED, "sized at start", why))
    else:
        parts.append(pinned("kv_blocks", str(record.num_gpu_blocks)))
    parts.append(pinned("engine_args", text(args)))
    # The graph-shaping variables the server sees beyond those the serve files set (which replay the
    # compile's own): the image's own ENV. The compile saw none on a host (its whole environment is
    # recorded and replayed); in an image, that image's ENV.
    replayed = f"the serve files replay the compile's {len(served)} variable(s)"
    if side.compiled_here:
        parts.append(compare("environment", "none", "none", f"the image the compile ran in; {replayed}"))
    elif side.env is None:
        why = f"{side.name}'s own environment is not known: {_how(side)}"
        parts.append(unchecked("environment", "none", UNKNOWN, why))
    else:
        extra = {k: v for k, v in side.env.items() if shapes_graphs(k) and k not in served and k != ROUTE_ENV}
        compiled_in = _compile_image_env(info)
        if compiled_in is None:
            why = "the bundle was compiled in an image whose own environment neuronc does not know: " + _RECOMPILE
            parts.append(unchecked("environment", UNKNOWN, env_text(extra), why))
        else:
            theirs = {k: v for k, v in compiled_in.items() if shapes_graphs(k) and k not in served and k != ROUTE_ENV}
            parts.append(compare("environment", env_text(theirs), env_text(extra), replayed))
    return parts, python_warning(recorded_python(info), side)


def _compile_image_env(info: Mapping[str, Any]) -> dict[str, str] | None:
    """The ENV of the image the compile ran in ({} on a host, whose variables are all recorded); None
    when neuronc does not know it (an image the support matrix records no ENV for)."""
    from neuronc.backends.support import releases

    runner = info.get("runner")
    if not isinstance(runner, Mapping) or runner.get("kind") in (None, "host"):
        return {}
    tag = runner.get("image")
    image = next((i for r in releases() for i in r.images if i.reference == tag), None)
    return dict(image.env) if image is not None and image.env is not None else None


def nxdi_parts(values: Any, side: ServingSide) -> tuple[list[Part], list[str]]:
    parts = version_parts(NXDI_VERSIONS, values.toolchain, side)
    parts.append(target_part(values.target, side, "nxdi"))
    config = dict(values.nxdi.neuron_config) if values.nxdi is not None else {}
    parts.append(pinned("tp", str(values.tp_degree), "the NeuronConfig in the bundle, which NxDI loads"))
    loaded = config.get("context_encoding_buckets")
    buckets = text(loaded if isinstance(loaded, list) else values.context_buckets)
    parts.append(pinned("buckets", buckets, "the NeuronConfig in the bundle, which NxDI loads"))
    return parts, []


def optimum_parts(values: Any, side: ServingSide) -> tuple[list[Part], list[str]]:
    """optimum-neuron compares its version and neuronx-cc's as exact strings before it loads an export."""
    parts = []
    for package in OPTIMUM_VERSIONS:
        ours, theirs = values.toolchain.get(package), side.versions.get(package)
        if not ours:
            parts.append(unchecked(package, NOT_RECORDED, theirs or UNKNOWN, f"the bundle records none: {_RECOMPILE}"))
        elif theirs is None and side.pins_only:
            parts.append(unchecked(package, ours, UNKNOWN, f"{side.source} records none: {_how(side)}"))
        elif side.pins_only and theirs is not None and public(theirs) == theirs:
            # A recipe records public versions only; the Neuron repository publishes one build of each.
            note = f"{side.source} records the public version; optimum-neuron compares the exact string {ours}"
            parts.append(compare(package, public(ours) or ours, theirs, note))
        else:
            parts.append(compare(package, ours, theirs or "none"))
    parts.append(target_part(values.target, side, "optimum-neuron"))
    return parts, []


__all__ = [
    "NXDI_VERSIONS",
    "OPTIMUM_VERSIONS",
    "VLLM_NEURON_VERSIONS",
    "nxdi_parts",
    "optimum_parts",
    "recorded_python",
    "recorded_versions",
    "target_part",
    "version_parts",
    "vllm_neuron_parts",
]
