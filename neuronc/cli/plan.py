"""`neuronc plan`: what each build would cost and what can be reused, before anything compiles."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._executor import (
    ExecutorName,
    ExecutorOpt,
    RayAddressOpt,
    RayConnectTimeoutOpt,
    RayResourcesOpt,
    RayRuntimeEnvOpt,
    refuse_ray_options_without_ray,
)
from neuronc.cli._options import JsonOpt, ProfilesOrDirsArg, StoreOpt, WideOpt
from neuronc.errors import EXIT_ENVIRONMENT, EXIT_INVALID_INPUT, PreflightError

if TYPE_CHECKING:
    from neuronc.cli._report import JSONObject
    from neuronc.pipeline.farm import Need, Node, RaySettings
    from neuronc.pipeline.plan import BuildPlan

SnapshotOpt = Annotated[
    Path | None,
    cli.Option("--snapshot", help="A local copy of the Hugging Face Neuron cache repo to look builds up in."),
]
OnlineOpt = Annotated[bool, cli.Option("--online", help="Look builds up in the Hugging Face Neuron cache on the Hub.")]
PlanTrafficOpt = Annotated[
    Path | None,
    cli.Option(
        "--traffic", help="Requests (as `neuronc buckets` reads them): each build's coverage and padding share."
    ),
]
PlanJobsOpt = Annotated[
    int,
    cli.Option("--jobs", "-j", min=1, help="Graphs the compile host builds in parallel (host RAM estimate)."),
]

_EPILOG = (
    "Examples: neuronc plan profiles/*.yaml · neuronc plan profiles/ --store s3://bucket/bundles --json · "
    "neuronc plan p.yaml --snapshot ./optimum-neuron-cache · neuronc plan p.yaml --executor ray (where each "
    "build would fit on the cluster at $RAY_ADDRESS). Exit 2 when a build cannot fit its target, 5 when it "
    "fits no node of the Ray cluster."
)


@command(name="plan", epilog=_EPILOG)
def plan_command(
    profiles: ProfilesOrDirsArg,
    store: StoreOpt = None,
    snapshot: SnapshotOpt = None,
    online: OnlineOpt = False,
    jobs: PlanJobsOpt = 1,
    traffic: PlanTrafficOpt = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    executor: ExecutorOpt = ExecutorName.LOCAL,
    ray_address: RayAddressOpt = None,
    ray_resources: RayResourcesOpt = None,
    ray_runtime_env: RayRuntimeEnvOpt = None,
    ray_connect_timeout: RayConnectTimeoutOpt = None,
) -> None:
    """For every build and graph: in the store? in the HF Neuron cache? will it fit (memory pre-flight)?"""
    from neuronc.pipeline.plan import plan_builds
    from neuronc.preflight import host_ram_bytes
    from neuronc.profile import expand_profile_paths, load_builds

    out.configure(json_mode=json_out, wide=wide)
    refuse_ray_options_without_ray(
        executor,
        {
            "--ray-address": ray_address,
            "--ray-resources": ray_resources,
            "--ray-runtime-env": ray_runtime_env,
            "--ray-connect-timeout": ray_connect_timeout,
        },
    )
    if snapshot is not None and online:
        raise cli.BadParameter("give --snapshot or --online, not both")
    settings = None
    if executor == ExecutorName.RAY:  # the Ray options are checked before anything is planned
        from neuronc.cli._executor import ray_settings

        settings = ray_settings(
            address=ray_address,
            resources=ray_resources,
            runtime_env=ray_runtime_env,
            shared_store=False,
            retries=0,
            jobs=None if jobs == 1 else jobs,
            connect_timeout=ray_connect_timeout,
        )
    builds = load_builds(expand_profile_paths(profiles))
    plans = plan_builds(builds, store=store, snapshot=snapshot, online=online, jobs=jobs, host_ram=host_ram_bytes())
    failing = [p for p in plans if p.estimate.fits is False]
    rows: list[JSONObject] = [p.to_json() for p in plans]  # a build's row, and its traffic and ray parts
    if traffic is not None:
        from neuronc.buckets import plan_traffic

        plan_traffic(builds, rows, traffic)
    nodes: list[Node] = []
    placed: list[tuple[Need, list[Node]]] = []
    if settings is not None:
        nodes, placed = _ray_placement(plans, settings, rows)
    unplaced = [need for need, nodes in placed if not nodes]
    exit_code = EXIT_INVALID_INPUT if failing else (EXIT_ENVIRONMENT if unplaced else 0)
    data = {"builds": rows, "fits": not failing and not unplaced, "exit_code": exit_code}
    out.result(data, lambda: _render(plans, placed, rows))
    for plan in plans:
        for warning in plan.estimate.warnings:
            out.warning(warning)
    if not failing and unplaced:
        if out.json_mode:
            raise cli.Exit(EXIT_ENVIRONMENT)
        from neuronc.pipeline.farm.cluster import refuse_unplaceable

        refuse_unplaceable([need for need, _ in placed], nodes)
    if not failing:
        return
    if out.json_mode:
        raise cli.Exit(EXIT_INVALID_INPUT)
    from neuronc.fsutil import plural
    from neuronc.preflight import smallest_fitting_tp

    details = []
    fixes = []
    for p in failing:
        details.append(f"{p.label}: {p.estimate.summary()}")
        config = p.context.model_config if p.context is not None else None
        better = smallest_fitting_tp(p.spec, config, p.backend) if config is not None else None
        if better is not None:
            fixes.append(f"raise tp_degree to {better} for {p.label} (the smallest supported degree that fits)")
    msg = f"{plural(len(failing), 'build')} cannot fit the target's memory per NeuronCore"
    hint = "; ".join(fixes) + ", " if fixes else "raise tp_degree, "
    raise PreflightError(msg, details=details, hint=hint + "or lower batch_size or sequence.max_length")


def _ray_placement(
    plans: list[BuildPlan], settings: RaySettings, rows: list[JSONObject]
) -> tuple[list[Node], list[tuple[Need, list[Node]]]]:
    """Each build's need on the Ray cluster and the nodes it fits, added to its JSON row as ``ray``."""
    from neuronc.pipeline.farm import placement

    # The builds as plan_builds resolved them: resolved once, not again for the cluster.
    contexts = [p.context for p in plans if p.context is not None]
    assert len(contexts) == len(plans), "plan_builds resolves every build"
    nodes, placed = placement(contexts, settings)
    for row, (need, fits) in zip(rows, placed, strict=True):
        row["ray"] = {"need": need.to_json(), "fits": bool(fits), "nodes": [n.name for n in fits]}
    return nodes, placed


def _render(
    plans: list[BuildPlan],
    placed: list[tuple[Need, list[Node]]] | None = None,
    documents: list[JSONObject] | None = None,
) -> None:
    from rich.markup import escape

    from neuronc.pipeline.plan import CacheStatus
    from neuronc.preflight import gib

    rows = []
    for p in plans:
        est = p.estimate
        fraction = est.hbm_fraction
        device = gib(est.device_per_core_bytes) if est.device_per_core_bytes is not None else "?"
        if est.hbm_per_core_bytes is not None:
            device += f" / {gib(est.hbm_per_core_bytes)}"
            if fraction is not None:
                device += f" ({fraction:.0%})"
        rows.append(
            [
                p.label,
                p.config_hash[:12],
                f"{p.spec.backend} · {p.spec.target} · tp {p.spec.tp_degree} · b{p.spec.batch_size}",
                p.store["status"],
                str(p.hf_cache.status),
                device,
                est.status,
                gib(est.host_split_bytes) if est.host_split_bytes else ("-" if est.model else "?"),
                gib(est.host_compile_bytes),
            ]
        )
    out.table(
        [
            "build",
            "key",
            "backend · target",
            "store",
            "hf cache",
            "device mem/core",
            "fit",
            "host split",
            "host compile",
        ],
        rows,
        optional=["key", "hf cache", "host split", "host compile"],
    )
    for index, p in enumerate(plans):
        names = ", ".join(g.graph.name for g in p.graphs)
        out.print(escape(f"{p.label}: {len(p.graphs)} graph(s): {names}"))
        if placed:
            need, fits = placed[index]
            where = f"fits {len(fits)} node(s): {', '.join(n.name for n in fits)}" if fits else "fits no node"
            out.print(escape(f"  ray: needs {need.describe()}; {where}"))
        if p.neuron_sdk and p.neuron_sdk.get("release"):
            from neuronc.backends.support import release_line

            out.print(escape(f"  {release_line(p.neuron_sdk)}"))
        if p.estimate.unknown_reason:
            out.print(escape(f"  pre-flight unknown: {p.estimate.unknown_reason}"))
        if p.store.get("note"):
            out.print(escape(f"  store: {p.store['note']}"))
        if p.store.get("other_toolchains"):
            out.print(escape(f"  store has this config for other toolchains: {', '.join(p.store['other_toolchains'])}"))
        if p.hf_cache.reason and p.hf_cache.status == CacheStatus.UNKNOWN:
            out.print(escape(f"  hf cache: {p.hf_cache.reason}"))
        if documents is not None:
            from neuronc.buckets import traffic_line

            line = traffic_line(documents[index])
            if line:
                out.print(escape(line))


__all__ = ["plan_command"]
