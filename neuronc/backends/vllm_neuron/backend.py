"""The ``vllm-neuron`` backend: Trn2/Trn3 builds for vLLM's Neuron plugin, prebuilt with the plugin's own compile.

From Neuron SDK 2.31 the vllm-neuron plugin serves through its own ``torch.compile`` path
(libtorch-neuronx-lite, no NxD Inference); its compiled graphs live in a compile cache keyed by
graph, shapes, versions, compiler arguments and platform target, and it can fill that cache
without a device (CPU compile mode). This backend runs exactly that - the real engine, in the
release's DLC image or on a host with the SDK - and puts the cache tree, the checkpoint and the
engine arguments into the bundle; ``neuronc deploy --for vllm`` serves it with a cache miss made
fatal. Which release: the profile's ``sdk:``, else the host's installed plugin, else the newest
release with a DLC image (neuronc.backends.support). See docs/backends.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends.base import (
    GIB,
    Availability,
    CompileJob,
    CompilePlan,
    CompileResult,
    HostRamModel,
    SpecProblem,
)
from neuronc.backends.containers import find_runtime
from neuronc.backends.neuron.common import BUNDLE_PLACEHOLDER, NeuronBackend
from neuronc.backends.neuron.env import NEURON_EXTRA_INDEX
from neuronc.backends.neuron.files import backend_extra, bundle_line
from neuronc.backends.support import (
    Image,
    Release,
    Resolution,
    Serves,
    detect_releases,
    resolve,
    supporting,
)
from neuronc.backends.vllm_neuron.engine import (
    CACHE_DIR,
    CHECKPOINT_DIR,
    VllmNeuronOptions,
    engine_problems,
    plan_graphs,
    serve_env,
)
from neuronc.backends.vllm_neuron.facts import CACHE_ROOT_ENV, ROUTE_ENV
from neuronc.backends.vllm_neuron.runner import IMAGE_ENV, requested_runner
from neuronc.backends.vllm_neuron.serving import VllmNeuronServing
from neuronc.backends.weights_binding import WeightsBinding
from neuronc.errors import BackendUnavailableError, EnvironmentIncompatibleError
from neuronc.keys import CompilerFlagsMode
from neuronc.spec import ServingStack, WeightsMode

if TYPE_CHECKING:
    from pydantic import BaseModel

    from neuronc.backends.bucket_rules import BucketRules
    from neuronc.backends.serving import ServingCapability
    from neuronc.backends.vllm_neuron.build import RunnerPlan
    from neuronc.spec import BuildSpec

NAME = "vllm-neuron"


def release_image(release: Release, target: str) -> Image | None:
    """The release's DLC image serving the plugin's torch.compile path on ``target``."""
    return next((i for i in release.images_serving(Serves.VLLM_NEURON) if target in i.targets), None)


def compiles_on_host(wanted: str, release: Release, host: Availability) -> bool:
    """``NEURONC_VLLM_NEURON_RUNNER=host``, or (auto) the plugin installed here is the build's release."""
    if wanted == "host":
        return True
    found = detect_releases(host.versions) if host.available and wanted == "auto" else []
    return release in found


class VllmNeuronBackend(NeuronBackend):
    name: ClassVar[str] = NAME
    # The plugin's torch.compile cache is keyed by graph, shapes, versions, compiler arguments and target,
    # never by weight values, and the bundle carries the checkpoint beside the cache tree that the engine
    # loads at start; but no upstream text says the cached graphs hold no constant folded from a weight
    # (aws-neuron vllm-neuron docs/design/compilation/, compilation_cache.md): unknown, so the weights key
    # stays part of its graphs key.
    weights_binding: ClassVar[WeightsBinding] = WeightsBinding(
        None, "vllm-neuron docs/design/compilation: cache key without weights, but no statement about constants"
    )
    description: ClassVar[str] = (
        "vLLM's vllm-neuron plugin, torch.compile path (Trn2/Trn3, SDK 2.31+): its compile cache, built in CPU "
        "compile mode in the release's DLC image or on a host with the SDK"
    )
    weights_modes: ClassVar[frozenset[str]] = frozenset({"on-load"})
    default_weights: ClassVar[WeightsMode] = "on-load"
    # The plugin takes its compiler arguments from its own configuration: nothing neuronc passes reaches it.
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.NONE
    # CPU compile traces on the meta device (no weights in memory); neuronx-cc runs per graph.
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        8 * GIB,
        0.0,
        4 * GIB,
        False,
        "neuronc's estimate, no source gives a per-compile figure: CPU compile mode traces on the meta device; "
        "neuronx-cc per parallel graph (the plugin runs up to 8 at once, its default: cpu_compilation.md)",
    )
    toolchain_package: ClassVar[str | None] = "vllm-neuron"
    serving_stacks: ClassVar[tuple[ServingStack, ...]] = (ServingStack.vllm,)
    serving: ClassVar[ServingCapability | None] = VllmNeuronServing()
    options_model: ClassVar[type[BaseModel] | None] = VllmNeuronOptions
    packages: ClassVar[tuple[str, ...]] = (
        "neuronx-cc",
        "nki",
        "libtorch-neuronx-lite",
        "vllm-neuron",
        "vllm",
        "torch",
        "transformers",
    )
    required: ClassVar[tuple[str, ...]] = ("neuronx-cc", "vllm-neuron", "vllm")
    install_hint: ClassVar[str | None] = (
        "install docker or podman to compile in the release's Deep Learning Container, or install the SDK "
        f"(pip install --extra-index-url {NEURON_EXTRA_INDEX} neuronx-cc libtorch-neuronx-lite vllm-neuron)"
    )

    def compiler_flags_problem(self) -> str:
        return "the vllm-neuron backend takes no compiler flags (the plugin sets neuronx-cc's); remove compiler.flags"

    def host_availability(self) -> Availability:
        return super().availability()

    def availability(self) -> Availability:
        """Available with the plugin installed here, or with a container runtime to run a DLC image."""
        host = self.host_availability()
        if host.available or find_runtime() is not None:
            return Availability(True, host.versions)
        return Availability(
            False,
            host.versions,
            reason=f"{host.reason}, and no container runtime (docker or podman) on PATH",
            install_hint=self.install_hint,
        )

    def resolve_release(self, target: str, sdk: str | None) -> Resolution:
        """``sdk:``, else the installed plugin's release, else the newest release with a DLC image."""
        found = resolve(self.name, target, sdk, self.toolchain_versions())
        if sdk is None and found.how == "newest" and found.problem is None:
            with_image = [
                r
                for r in supporting(self.name, target)
                if release_image(r, target) is not None and not r.named_only(self.name, target)
            ]
            if with_image and with_image[-1] is not found.release:
                note = f"SDK {found.release.version if found.release else '?'} has no known DLC image"
                return Resolution(with_image[-1], "newest", notes=(note,))
        return found

    def check_spec(self, spec: BuildSpec) -> Sequence[SpecProblem]:
        return engine_problems(spec)

    def bucket_rules(self, spec: BuildSpec) -> BucketRules:
        """Prefill (context) buckets: any token count up to max_context_length (the largest becomes
        max_num_batched_tokens). Decode (token) buckets: below max_length, multiples of 128
        (decode_context_length_buckets, engine.engine_problems); max_length is always compiled."""
        from neuronc.backends.bucket_rules import BucketRule, BucketRules
        from neuronc.backends.vllm_neuron.facts import DECODE_BUCKET_MULTIPLE

        seq = spec.sequence
        token = BucketRule(
            seq.max_length,
            multiple=DECODE_BUCKET_MULTIPLE,
            largest=seq.max_length,
            source=(
                f"decode_context_length_buckets are multiples of {DECODE_BUCKET_MULTIPLE} below max_length "
                "(vllm-neuron docs/guides/reference-configuration.md); max_length is always compiled"
            ),
        )
        return BucketRules(BucketRule(seq.max_context_length), token)

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.ensure_valid(spec)
        release = self.release_for(spec).release
        notes = (
            f"Neuron SDK {release.version if release else 'unknown'}; the plugin names its NEFFs by cache key: "
            "the graphs are its buckets",
        )
        layout = f"HF safetensors in {CHECKPOINT_DIR}/, sharded by the plugin when it loads them"
        return CompilePlan(graphs=plan_graphs(spec), weights_layout=layout, notes=notes)

    # -- where it compiles ---------------------------------------------------------------------------

    def runner_plan(self, spec: BuildSpec) -> RunnerPlan:
        """The host when its installed release is the build's (or ``NEURONC_VLLM_NEURON_RUNNER=host``),
        else the release's DLC image in docker or podman."""
        from neuronc.backends.vllm_neuron.build import RunnerPlan

        resolution = self.release_for(spec)
        if resolution.release is None or resolution.problem is not None:
            raise EnvironmentIncompatibleError(resolution.problem or "no Neuron SDK release for this build")
        release = resolution.release
        wanted = requested_runner()
        host = self.host_availability()
        if compiles_on_host(wanted, release, host):
            if not host.available:
                raise BackendUnavailableError(
                    f"vllm-neuron is not installed here: {host.reason}", hint=self.install_hint
                )
            self.check_toolchain_release(spec)
            return RunnerPlan("host", release, str(host.versions.get("vllm-neuron")))
        runtime = find_runtime(prefer=wanted if wanted in ("docker", "podman") else None)
        if runtime is None:
            msg = f"no container runtime ({wanted if wanted != 'auto' else 'docker or podman'}) on PATH"
            raise BackendUnavailableError(msg, hint=self.install_hint)
        image = release_image(release, spec.target)
        override = os.environ.get(IMAGE_ENV)
        if image is None:
            msg = f"no Deep Learning Container image of Neuron SDK {release.version} is known for vllm-neuron"
            hint = "set sdk: to a release with an image (`neuronc backends`), or compile on a host with that SDK"
            raise EnvironmentIncompatibleError(msg, hint=hint)
        if override and "@sha256:" not in override:
            raise EnvironmentIncompatibleError(
                f"{IMAGE_ENV}={override}: pin the image by digest (repository@sha256:...)"
            )
        plugin = image.plugin or str(release.version_of("vllm-neuron"))
        return RunnerPlan(runtime.kind, release, plugin, runtime, image, override or image.reference)

    def build_versions(self, spec: BuildSpec, availability: Availability) -> dict[str, str | None]:
        """The host's versions when it compiles; else the release's image's, which the compile checks."""
        from neuronc import __version__

        host = dict(availability.versions or self.toolchain_versions())
        release = self.release_for(spec).release
        if release is None or compiles_on_host(requested_runner(), release, self.host_availability()):
            return host
        image = release_image(release, spec.target)
        packages = dict(image.packages) if image is not None else {n: v[0] for n, v in release.packages.items()}
        return {"neuronc": __version__, **{name: packages[name] for name in sorted(packages)}}

    def keyed_environment(
        self, spec: BuildSpec, versions: Mapping[str, str | None], environ: Mapping[str, str]
    ) -> dict[str, str]:
        """What the manifest records from the compile's environment because it shapes the graphs: the
        ``VLLM_NEURON_*`` / ``NEURON_*`` variables ``recorded_env`` keeps (the KV sizing ones among
        them: the KV cache shape, and so the sized block count, is an input of every graph), and the
        route when set (unset, the plugin version's default, which the toolchain key holds). Not the
        variables neuronc sets from the profile, the worker count or the runtime's core placement."""
        from neuronc.backends.vllm_neuron.build import recorded_env

        plugin = str(versions.get("vllm-neuron") or "")
        keyed = recorded_env(plugin, environ)
        if environ.get(ROUTE_ENV):
            keyed[ROUTE_ENV] = environ[ROUTE_ENV]
        return keyed

    def compile(self, job: CompileJob) -> CompileResult:
        from neuronc.backends.vllm_neuron.build import run_compile

        self.ensure_valid(job.spec)
        plan = self.runner_plan(job.spec)
        result = run_compile(job, plan)
        result.extra["neuron_sdk"] = self.release_for(job.spec).to_json()
        result.extra["load_snippet"] = serve_snippet(BUNDLE_PLACEHOLDER, result.extra["vllm_neuron"])
        return result

    def recognizes(self, directory: str | os.PathLike[str]) -> bool:
        return (Path(directory) / CACHE_DIR / "neuron" / "compile_cache").is_dir()

    def load_snippet(self, bundle_dir: str) -> str | None:
        info = backend_extra(bundle_dir, "vllm_neuron")
        return serve_snippet(bundle_dir, info) if info else None


def serve_snippet(bundle_dir: str, info: dict[str, Any]) -> str:
    """Shell lines that serve a vllm-neuron bundle on a Trn host (``neuronc deploy --for vllm`` writes more).

    Every manifest value is shell-quoted: the manifest is data, never code.
    """
    import shlex

    args = [str(a) for a in info.get("engine_args") or []]
    recorded = {str(k): str(v) for k, v in dict(info.get("kv_sizing_env") or {}).items()}
    recorded.update({str(k): str(v) for k, v in dict(info.get("compile_env") or {}).items()})
    plugin = str(info.get("plugin") or "")
    env = serve_env(
        logical_nc_config=int(info.get("logical_nc_config") or 2),
        plugin=plugin,
        route=str(info["route"]) if info.get("route") else None,
        recorded_env=recorded,
        target=str(info["platform_target"]) if info.get("platform_target") else None,
    )
    cache = shlex.quote(f"{bundle_dir}/{CACHE_DIR}")
    root = f'"${CACHE_ROOT_ENV}"'
    return "\n".join(
        [
            "# " + bundle_line(bundle_dir),
            # Writable: the plugin writes lock files beside its entries (a bundle may be read-only).
            f"export {CACHE_ROOT_ENV}=$(mktemp -d)",
            f"cp -a {cache}/. {root}/ && chmod -R u+w {root}",
            "export " + shlex.join(f"{k}={v}" for k, v in env.items()),
            f"vllm serve {shlex.quote(bundle_dir + '/' + CHECKPOINT_DIR)} {shlex.join(args)}",
        ]
    )
