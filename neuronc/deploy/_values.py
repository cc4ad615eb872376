"""The serving values every emitter uses, read from a bundle's manifest (and nothing else)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from neuronc.bundle import MANIFEST_NAME, Manifest
from neuronc.errors import BundleFormatError, safe_text
from neuronc.hardware import LNC_OPTION, chip, lnc
from neuronc.spec import TARGETS, WEIGHT_MODES, served_model_name

if TYPE_CHECKING:
    from neuronc.backends.serving import RecordedEngine

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class NxdiRecord:
    """What the nxdi backend recorded in ``manifest.extra["nxdi"]``: the NeuronConfig it compiled with."""

    neuron_config: Mapping[str, Any]

    @property
    def continuous_batching(self) -> bool:
        return bool(self.neuron_config.get("is_continuous_batching"))

    @property
    def ctx_batch_size(self) -> int | None:
        value = self.neuron_config.get("ctx_batch_size")
        return int(value) if isinstance(value, int) else None

    @property
    def block_kv_layout(self) -> bool:
        nc = self.neuron_config
        return any(bool(nc.get(k)) for k in ("is_block_kv_layout", "is_prefix_caching", "is_chunked_prefill"))


@dataclass(frozen=True)
class TnxRecord:
    """What the transformers-neuronx backend recorded: the class, the exact from_pretrained kwargs, the NEFFs."""

    model_class: str  # the class name exported at transformers_neuronx's top level, e.g. LlamaForSampling
    from_pretrained: Mapping[str, Any]  # batch_size, tp_degree, amp ('f32'/'f16'/'bf16'), n_positions, ...
    neuron_config: Mapping[str, Any] | None
    neffs: tuple[str, ...]


@dataclass(frozen=True)
class VllmNeuronRecord:
    """What the vllm-neuron backend recorded in ``manifest.extra["vllm_neuron"]`` (``run_compile``)."""

    release: str  # the Neuron SDK release compiled for
    plugin: str  # the vllm-neuron version that compiled (0.21.0.1.0.0 ...)
    vllm: str | None
    logical_nc_config: int
    engine_args: tuple[str, ...]  # ``vllm serve`` arguments after the checkpoint
    kv_sizing_env: Mapping[str, str]
    cache_root: str  # relative to the bundle: the VLLM_CACHE_ROOT the compile filled
    checkpoint: str  # relative to the bundle: the checkpoint the engine loads
    pinned: str | None  # repository@sha256:... of the DLC image the compile ran in, if it ran in one
    route: str | None = None  # VLLM_NEURON_BACKEND as compiled (None: a bundle from before it was recorded)
    num_gpu_blocks: int | None = None  # the KV block count the compile sized (None: not recorded)
    compile_env: Mapping[str, str] = field(default_factory=dict)  # the compile's VLLM_NEURON_*/NEURON_* variables
    target: str | None = None  # the platform target compiled for (NEURON_PLATFORM_TARGET_OVERRIDE)


@dataclass(frozen=True)
class ServingValues:
    """Shapes, names and versions a serving stack needs, all from the manifest."""

    bundle: str  # the bundle's path as the serving host sees it
    model_id: str
    backend: str
    target: str
    tp_degree: int
    batch_size: int
    amp: str
    max_length: int
    max_context_length: int
    context_buckets: tuple[int, ...]
    config_hash: str
    weights: str
    toolchain: Mapping[str, str | None]
    bundle_bytes: int = 0  # every file the manifest lists
    options: Mapping[str, Any] = field(default_factory=dict)
    nxdi: NxdiRecord | None = None
    tnx: TnxRecord | None = None
    vllm_neuron: VllmNeuronRecord | None = None
    sdk: str | None = None  # the profile's ``sdk:`` (a Neuron SDK release or series), if it named one

    @property
    def runtime_env(self) -> dict[str, str]:
        """Runtime variables the compiled graphs need on the serving host: on a target with more than one
        LNC size (trn2), ``NEURON_LOGICAL_NC_CONFIG`` = the LNC compiled for. The runtime defaults to 2 on
        trn2 and must match the compiler's LNC (Neuron docs, "Logical NeuronCore configuration")."""
        device = chip(self.target)
        if device is None or len(device.lnc_sizes) < 2:
            return {}
        return {"NEURON_LOGICAL_NC_CONFIG": str(lnc(self.target, self.options))}

    @property
    def dtype(self) -> str:
        return DTYPES.get(self.amp, self.amp)

    @property
    def key(self) -> str:
        return self.config_hash[:12]

    @property
    def served_name(self) -> str:
        """The name the server answers to (a local model by its directory's name, not the build host's path)."""
        return served_model_name(self.model_id)

    @property
    def name(self) -> str:
        """A service/model name: model name + key, lower case, [a-z0-9-] only."""
        base = self.model_id.rstrip("/").split("/")[-1].lower()
        safe = "".join(c if c.isalnum() else "-" for c in base).strip("-")[:40] or "model"
        return f"{safe}-{self.key}"

    @property
    def longest_prompt(self) -> int:
        """The longest prompt a context-encoding graph of this bundle takes (its largest context bucket)."""
        return max(self.context_buckets) if self.context_buckets else self.max_context_length

    @property
    def max_model_len(self) -> int:
        """The longest sequence vLLM may admit: the sequence length, or the largest context bucket when shorter.

        A prompt longer than the largest compiled context would fail inside the model; with
        ``--max-model-len`` at this value vLLM's API layer refuses it first (vllm-neuron and
        optimum-neuron's server both pass it on).
        """
        return min(self.max_length, self.longest_prompt)

    def version(self, package: str) -> str | None:
        value = self.toolchain.get(package)
        return value if isinstance(value, str) and value else None


# -- reading the manifest: every value checked against what it can be -----------------------------
# A bundle is data from a store: its manifest may hold anything a JSON file can. Every value that
# reaches a generated file (shell scripts, env files, YAML, JSON) is checked here against what it can
# be; the emitters then quote it for their file's syntax (``_quote``). A value that fails is refused
# (exit 2), naming the manifest field.
MAX_COUNT = 1 << 20  # tp degree, batch, sequence lengths: spec.PositiveInt's range
MAX_BUCKETS = 1024
MAX_MODEL_ID = 1024
# The versions deploy reads (images, comments, refusals); a recorded value for one of them must be a
# PEP 440 version. Other entries are kept when they are versions and dropped otherwise (cpu_isa):
# no emitter reads them, so no unchecked value can reach a file.
DEPLOY_PACKAGES = (
    "neuronc",
    "neuronx-cc",
    "neuronx-distributed",
    "neuronx-distributed-inference",
    "optimum-neuron",
    "transformers-neuronx",
    "torch-neuronx",
    "libneuronxla",
    "vllm",
    "vllm-neuron",
    "libtorch-neuronx-lite",
    "nki",
    "torch",
    "transformers",
)
_PACKAGE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")  # PEP 508 names
_BACKEND = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # keyword arguments, config keys


def _unsafe_char(text: str) -> str | None:
    """The first character of ``text`` that may not reach a generated file, or None.

    Control and format characters and Unicode line/paragraph separators end lines in shells, env
    files and YAML (YAML breaks lines at U+0085, U+2028, U+2029); ``$`` and the backtick are
    expansions in sh, docker compose files and env files.
    """
    for char in text:
        if char in "$`" or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return char
    return None


class _Reader:
    """Reads manifest values, checking each; collects every problem, then refuses them at once."""

    def __init__(self, manifest: Manifest, where: str) -> None:
        self.manifest = manifest
        self.where = where
        self.problems: list[str] = []

    def refuse(self, field: str, value: object, why: str) -> None:
        self.problems.append(f"{field}: {safe_text(repr(value), 80)} {why}")

    def raw(self, *keys: str) -> Any:
        node: Any = self.manifest.profile
        for key in keys:
            if not isinstance(node, Mapping) or key not in node:
                msg = f"{self.where}: manifest profile has no {'.'.join(keys)}"
                raise BundleFormatError(msg, hint="this bundle was not written by a neuronc that records its profile")
            node = node[key]
        return node

    def count(self, *keys: str) -> int:
        value = self.raw(*keys)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            self.refuse("profile." + ".".join(keys), value, f"is not an integer from 1 to {MAX_COUNT}")
            return 1
        return value

    def buckets(self, *keys: str) -> tuple[int, ...]:
        value = self.raw(*keys)
        field = "profile." + ".".join(keys)
        good = isinstance(value, list) and len(value) <= MAX_BUCKETS
        if good and all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_COUNT for b in value):
            return tuple(value)
        self.refuse(field, value, f"is not a list of at most {MAX_BUCKETS} integers from 1 to {MAX_COUNT}")
        return ()

    def choice(self, field: str, value: object, choices: tuple[str, ...]) -> str:
        if isinstance(value, str) and value in choices:
            return value
        self.refuse(field, value, f"is not one of {', '.join(choices)}")
        return choices[0]

    def model_id(self) -> str:
        value = self.raw("model", "id")
        if not isinstance(value, str) or not 1 <= len(value) <= MAX_MODEL_ID:
            self.refuse("profile.model.id", value, f"is not a Hub id or a path of 1 to {MAX_MODEL_ID} characters")
            return "model"
        bad = _unsafe_char(value)
        if bad is not None:
            self.refuse("profile.model.id", value, f"holds {safe_text(repr(bad))}: not a Hub id or a path")
            return "model"
        return value

    def toolchain(self) -> dict[str, str | None]:
        kept: dict[str, str | None] = {}
        for package, version in self.manifest.toolchain.items():
            if version is None:
                kept[package] = None
                continue
            if _PACKAGE.fullmatch(package) and _is_version(version):
                kept[package] = version
            elif package in DEPLOY_PACKAGES:
                self.refuse(f"toolchain.{package}", version, "is not a version (PEP 440)")
        return kept

    def options(self) -> dict[str, Any]:
        value = self.manifest.profile.get("options") or {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) and _KEY.fullmatch(k) for k in value):
            self.refuse("profile.options", value, "is not a mapping of option names to values")
            return {}
        lnc = value.get(LNC_OPTION)
        device = chip(self.manifest.target)
        sizes = device.lnc_sizes if device is not None else (1,)
        if lnc is not None and (isinstance(lnc, bool) or lnc not in sizes):
            self.refuse(f"profile.options.{LNC_OPTION}", lnc, f"is not an LNC size of this target ({sizes})")
            return {k: v for k, v in value.items() if k != LNC_OPTION}
        return dict(value)

    def check(self) -> None:
        if self.problems:
            msg = f"{self.where}: the manifest holds values no serving file can be written from"
            hint = "the bundle was not written by neuronc, or was changed after; rebuild it or fetch it again"
            raise BundleFormatError(msg, details=self.problems[:20], hint=hint)


def _is_version(value: object) -> bool:
    if not isinstance(value, str) or len(value) > 128:
        return False
    try:
        Version(value)
    except InvalidVersion:
        return False
    return True


def _nxdi(reader: _Reader) -> NxdiRecord | None:
    info = reader.manifest.extra.get("nxdi")
    if not isinstance(info, Mapping):
        return None
    neuron_config = info.get("neuron_config")
    if neuron_config is not None and not isinstance(neuron_config, Mapping):
        reader.refuse("extra.nxdi.neuron_config", neuron_config, "is not a mapping")
    return NxdiRecord(neuron_config=dict(neuron_config) if isinstance(neuron_config, Mapping) else {})


def _tnx(reader: _Reader) -> TnxRecord | None:
    info = reader.manifest.extra.get("transformers_neuronx")
    if not isinstance(info, Mapping):
        return None
    kwargs = info.get("from_pretrained")
    kwargs = dict(kwargs) if isinstance(kwargs, Mapping) else {}
    missing = [k for k in TNX_RECORDED if k not in kwargs]
    if missing or not all(isinstance(k, str) and _KEY.fullmatch(k) for k in kwargs):
        why = f"lacks {', '.join(missing)}" if missing else "holds a key that is not an argument name"
        reader.refuse("extra.transformers_neuronx.from_pretrained", info.get("from_pretrained"), why)
    neuron_config = kwargs.pop("neuron_config", None)
    neffs = info.get("neffs")
    if not isinstance(neffs, list) or not all(isinstance(n, str) and _unsafe_char(n) is None for n in neffs):
        reader.refuse("extra.transformers_neuronx.neffs", neffs, "is not a list of file names")
        neffs = []
    return TnxRecord(
        model_class=str(info.get("model_class", "")).rpartition(".")[2],
        from_pretrained=kwargs,
        neuron_config=dict(neuron_config) if isinstance(neuron_config, Mapping) else None,
        neffs=tuple(neffs),
    )


_RELEASE = re.compile(r"^[0-9]{1,3}(?:\.[0-9]{1,3}){0,2}$")
_RELATIVE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]{0,254}@sha256:[0-9a-f]{64}$")
MAX_ENGINE_ARGS = 256


def _vllm_neuron(reader: _Reader) -> VllmNeuronRecord | None:
    """``extra.vllm_neuron``, each field checked: every one of them reaches serve.sh or the compose file.
    The checks are the backend's (its serving capability, ``RecordedEngine``); a backend without one
    has no record deploy reads."""
    from neuronc.backends.serving import recorded_engine

    info, backend = reader.manifest.extra.get("vllm_neuron"), reader.manifest.backend
    engine = recorded_engine(backend) if isinstance(info, Mapping) and isinstance(backend, str) else None
    if not isinstance(info, Mapping) or engine is None:
        return None
    where = "extra.vllm_neuron."
    text: dict[str, str] = {}
    for key, pattern in (("release", _RELEASE), ("cache_root", _RELATIVE), ("checkpoint", _RELATIVE)):
        value = info.get(key)
        if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value.split("/"):
            why = "is not a release version" if key == "release" else "is not a path inside the bundle"
            reader.refuse(where + key, value, why)
        text[key] = value if isinstance(value, str) else ""
    versions = {k: info.get(k) for k in ("plugin", "vllm")}
    for key, value in versions.items():
        if not (value is None and key == "vllm") and not _is_version(value):
            reader.refuse(where + key, value, "is not a version (PEP 440)")
    lnc = info.get("logical_nc_config")
    if lnc not in (1, 2) or isinstance(lnc, bool):
        reader.refuse(where + "logical_nc_config", lnc, "is not 1 or 2")
    given = info.get("engine_args")
    args: list[str] = []
    if isinstance(given, list) and 0 < len(given) <= MAX_ENGINE_ARGS:
        args = [a for a in given if isinstance(a, str) and len(a) <= 4096 and _unsafe_char(a) is None]
    if not args or len(args) != len(given or ()):
        reader.refuse(where + "engine_args", given, f"is not a list of at most {MAX_ENGINE_ARGS} plain arguments")
        args = []
    elif (problem := engine.engine_args_problem(args)) is not None:
        # Only what the compile writes (engine.ENGINE_FIELDS), exactly: deploy places the checkpoint and
        # --port itself, and anything else (--trust-remote-code, --host, an abbreviation) is refused.
        reader.refuse(where + "engine_args", *problem)
        args = []
    kv = info.get("kv_sizing_env") or {}
    sizing = engine.kv_sizing_env
    if not isinstance(kv, Mapping) or not all(
        k in sizing and isinstance(v, str) and re.fullmatch(r"[0-9]+(\.[0-9]+)?", v) for k, v in kv.items()
    ):
        reader.refuse(where + "kv_sizing_env", kv, f"is not numbers for {', '.join(sizing)}")
        kv = {}
    route, blocks, env, target = _vllm_neuron_key(reader, info, engine)
    runner = info.get("runner")
    pinned = runner.get("pinned") if isinstance(runner, Mapping) else None
    if pinned is not None and (not isinstance(pinned, str) or not _PINNED.fullmatch(pinned)):
        reader.refuse(where + "runner.pinned", pinned, "is not an image pinned by digest (repository@sha256:...)")
        pinned = None
    return VllmNeuronRecord(
        release=text["release"],
        plugin=str(versions["plugin"]),
        vllm=versions["vllm"] if isinstance(versions["vllm"], str) else None,
        logical_nc_config=lnc if isinstance(lnc, int) else 2,
        engine_args=tuple(args),
        kv_sizing_env=dict(kv),
        cache_root=text["cache_root"],
        checkpoint=text["checkpoint"],
        pinned=pinned,
        route=route,
        num_gpu_blocks=blocks,
        compile_env=env,
        target=target,
    )


_ROUTE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def _vllm_neuron_key(
    reader: _Reader, info: Mapping[str, Any], engine: RecordedEngine
) -> tuple[str | None, int | None, dict[str, str], str | None]:
    """The route, KV block count, recorded environment and platform target (each None/empty when absent)."""

    where = "extra.vllm_neuron."
    route = info.get("route")
    if route is not None and (not isinstance(route, str) or not _ROUTE.fullmatch(route)):
        reader.refuse(where + "route", route, "is not a route name (vllm_neuron, neuron_native ...)")
        route = None
    blocks = info.get("num_gpu_blocks")
    if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= 1 << 31):
        reader.refuse(where + "num_gpu_blocks", blocks, "is not a positive block count")
        blocks = None
    env = info.get("compile_env") or {}
    good = isinstance(env, Mapping) and all(
        isinstance(k, str)
        and isinstance(v, str)
        and k.startswith(engine.recorded_env_prefixes)
        and engine.env_value_problem(k, v) is None
        for k, v in env.items()
    )
    if not good:
        reader.refuse(where + "compile_env", env, "is not VLLM_NEURON_*/NEURON_* variables with plain values")
        env = {}
    target = info.get("platform_target")
    if target is not None and (not isinstance(target, str) or not _ROUTE.fullmatch(target)):
        reader.refuse(where + "platform_target", target, "is not a platform target (trn2, trn3)")
        target = None
    return route, blocks, dict(env), target


def _sdk(reader: _Reader) -> str | None:
    value = reader.manifest.profile.get("sdk")
    if value is None:
        return None
    if not isinstance(value, str) or not _RELEASE.fullmatch(value):
        reader.refuse("profile.sdk", value, "is not a Neuron SDK release (2.31 or 2.31.1)")
        return None
    return value


# The transformers-neuronx from_pretrained arguments neuronc records for every build (torchserve's
# handler takes them from the record).
TNX_RECORDED = ("batch_size", "tp_degree", "amp", "n_positions", "context_length_estimate")


def serving_values(manifest: Manifest, bundle_dir: Path, bundle_path: str | None = None) -> ServingValues:
    """Read every serving value from the manifest, each checked (BundleFormatError, exit 2, naming the fields)."""
    reader = _Reader(manifest, f"{safe_text(bundle_dir)}/{MANIFEST_NAME}")
    profile = manifest.profile
    if not isinstance(manifest.backend, str) or not _BACKEND.fullmatch(manifest.backend):
        reader.refuse("backend", manifest.backend, "is not a backend name")
    values = ServingValues(
        bundle=(bundle_path or str(bundle_dir.absolute())).rstrip("/") or "/",
        model_id=reader.model_id(),
        backend=manifest.backend,
        target=reader.choice("target", manifest.target, TARGETS),
        tp_degree=reader.count("tp_degree"),
        batch_size=reader.count("batch_size"),
        amp=reader.choice("profile.amp", reader.raw("amp"), tuple(DTYPES)),
        max_length=reader.count("sequence", "max_length"),
        max_context_length=reader.count("sequence", "max_context_length"),
        context_buckets=reader.buckets("sequence", "context_buckets"),
        config_hash=manifest.config_hash,
        weights=reader.choice("profile.weights", profile.get("weights") or "presharded", WEIGHT_MODES),
        toolchain=reader.toolchain(),
        bundle_bytes=sum(entry.size for entry in manifest.files),
        options=reader.options(),
        nxdi=_nxdi(reader),
        tnx=_tnx(reader),
        vllm_neuron=_vllm_neuron(reader),
        sdk=_sdk(reader),
    )
    reader.check()
    return values


__all__ = [
    "DEPLOY_PACKAGES",
    "DTYPES",
    "NxdiRecord",
    "ServingValues",
    "TnxRecord",
    "VllmNeuronRecord",
    "serving_values",
]
