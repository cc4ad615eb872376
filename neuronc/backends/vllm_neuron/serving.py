"""The vllm-neuron serving capability (``neuronc.backends.serving``): the parts of the plugin's key
for a bundle, against the serving side, under the serve files ``neuronc deploy`` writes.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from neuronc.backends.serving import (
    NOT_RECORDED,
    RECOMPILE,
    UNKNOWN,
    Part,
    ServingSide,
    compare,
    env_text,
    how_to_check,
    pinned,
    python_warning,
    recorded_python,
    recorded_versions,
    target_part,
    text,
    unchecked,
    version_parts,
)
from neuronc.backends.support import releases
from neuronc.backends.vllm_neuron import engine, facts
from neuronc.backends.vllm_neuron.engine import serve_env
from neuronc.backends.vllm_neuron.facts import ROUTE_ENV, shapes_graphs
from neuronc.errors import InvalidInputError

VLLM_NEURON_VERSIONS = ("neuronx-cc", "nki", "libtorch-neuronx-lite", "torch", "vllm-neuron", "vllm")


def vllm_neuron_parts(values: Any, info: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]:
    """The plugin's key parts (and the warnings): the bundle's against what ``side`` gives the engine
    under the serve files ``neuronc deploy`` writes."""
    record = values.vllm_neuron
    if record is None:
        msg = "the manifest has no extra.vllm_neuron record of the engine this bundle was compiled for"
        raise InvalidInputError(msg, hint="recompile the bundle with this neuronc")
    # The versions the compile had where it ran (read there), over the toolchain key's: a DLC's torch,
    # for one, is recorded by the compile but not pinned by the matrix row the toolchain comes from.
    mine: dict[str, str | None] = {**values.toolchain, **recorded_versions(info)}
    mine.setdefault("vllm-neuron", record.plugin)
    mine.setdefault("vllm", record.vllm)
    parts = version_parts(VLLM_NEURON_VERSIONS, mine, side)
    parts.append(target_part(record.target, side, "vllm-neuron"))
    served = serve_env(
        logical_nc_config=record.logical_nc_config,
        plugin=record.plugin,
        route=record.route,
        recorded_env={**record.kv_sizing_env, **record.compile_env},
        target=record.target,
    )
    args = list(record.engine_args)
    parts.append(pinned("tp", str(values.tp_degree)))
    parts.append(pinned("lnc", str(record.logical_nc_config)))
    if record.route:
        parts.append(pinned("route", record.route))
    elif side.env is None and not side.compiled_here:
        why = f"the serve files leave {ROUTE_ENV} unset; {side.name}'s own value is not known: {how_to_check(side)}"
        parts.append(unchecked("route", "unset", UNKNOWN, why))
    else:
        parts.append(
            compare("route", "unset", "unset" if side.compiled_here else (side.env or {}).get(ROUTE_ENV, "unset"))
        )
    if record.num_gpu_blocks is None:
        why = f"the bundle records no KV block count, so the server sizes its own: {RECOMPILE}"
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
        why = f"{side.name}'s own environment is not known: {how_to_check(side)}"
        parts.append(unchecked("environment", "none", UNKNOWN, why))
    else:
        extra = {k: v for k, v in side.env.items() if shapes_graphs(k) and k not in served and k != ROUTE_ENV}
        compiled_in = _compile_image_env(info)
        if compiled_in is None:
            why = "the bundle was compiled in an image whose own environment neuronc does not know: " + RECOMPILE
            parts.append(unchecked("environment", UNKNOWN, env_text(extra), why))
        else:
            theirs = {k: v for k, v in compiled_in.items() if shapes_graphs(k) and k not in served and k != ROUTE_ENV}
            parts.append(compare("environment", env_text(theirs), env_text(extra), replayed))
    return parts, python_warning(recorded_python(info), side)


def _compile_image_env(info: Mapping[str, Any]) -> dict[str, str] | None:
    """The ENV of the image the compile ran in ({} on a host, whose variables are all recorded); None
    when neuronc does not know it (an image the support matrix records no ENV for)."""
    runner = info.get("runner")
    if not isinstance(runner, Mapping) or runner.get("kind") in (None, "host"):
        return {}
    tag = runner.get("image")
    image = next((i for r in releases() for i in r.images if i.reference == tag), None)
    return dict(image.env) if image is not None and image.env is not None else None


class VllmNeuronServing:
    """The serving capability of the vllm-neuron backend: the key parts for the verdict, and the engine
    record deploy writes the serve lines from (``neuronc.backends.serving.RecordedEngine``)."""

    cache_root_env: ClassVar[str] = facts.CACHE_ROOT_ENV
    fail_on_miss_env: ClassVar[str] = facts.FAIL_ON_MISS_ENV
    kv_sizing_env: ClassVar[tuple[str, ...]] = facts.KV_SIZING_ENV
    recorded_env_prefixes: ClassVar[tuple[str, ...]] = facts.RECORDED_ENV_PREFIXES

    def engine_args_problem(self, args: Sequence[str]) -> tuple[str, str] | None:
        return engine.engine_args_problem(args)

    def env_value_problem(self, name: str, value: str) -> str | None:
        return facts.env_value_problem(name, value)

    def serve_env(
        self,
        *,
        logical_nc_config: int,
        plugin: str,
        route: str | None,
        recorded_env: Mapping[str, str],
        target: str | None = None,
    ) -> dict[str, str]:
        return serve_env(
            logical_nc_config=logical_nc_config, plugin=plugin, route=route, recorded_env=recorded_env, target=target
        )

    def key_parts(self, values: Any, extra: Mapping[str, Any], side: ServingSide) -> tuple[list[Part], list[str]]:
        info = extra.get("vllm_neuron")
        return vllm_neuron_parts(values, info if isinstance(info, Mapping) else {}, side)


__all__ = ["VLLM_NEURON_VERSIONS", "VllmNeuronServing", "vllm_neuron_parts"]
