"""`neuronc plan`: what each build would cost and what can be reused, before anything compiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt, StoreOpt, WideOpt
from neuronc.errors import EXIT_INVALID_INPUT, PreflightError

ProfilesOrDirsArg = Annotated[
    list[Path], cli.Argument(help="Profile YAML files, or directories of them.", show_default=False)
]
SnapshotOpt = Annotated[
    Path | None,
    cli.Option("--snapshot", help="A local copy of the Hugging Face Neuron cache repo to look builds up in."),
]
OnlineOpt = Annotated[bool, cli.Option("--online", help="Look builds up in the Hugging Face Neuron cache on the Hub.")]
PlanJobsOpt = Annotated[
    int,
    cli.Option("--jobs", "-j", min=1, help="Graphs the compile host builds in parallel (host RAM estimate)."),
]

_EPILOG = (
    "Examples: neuronc plan profiles/*.yaml · neuronc plan profiles/ --store s3://bucket/bundles --json · "
    "neuronc plan p.yaml --snapshot ./optimum-neuron-cache. Exit 2 when a build cannot fit its target."
)


@command(name="plan", epilog=_EPILOG)
def plan_command(
    profiles: ProfilesOrDirsArg,
    store: StoreOpt = None,
    snapshot: SnapshotOpt = None,
    online: OnlineOpt = False,
    jobs: PlanJobsOpt = 1,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """For every build and graph: in the store? in the HF Neuron cache? will it fit (memory pre-flight)?"""
    from neuronc.ci import plan_builds
    from neuronc.preflight import host_ram_bytes
    from neuronc.profile import expand_profile_paths, load_builds

    out.configure(json_mode=json_out, wide=wide)
    if snapshot is not None and online:
        raise cli.BadParameter("give --snapshot or --online, not both")
    specs = load_builds(expand_profile_paths(profiles))
    plans = plan_builds(specs, store=store, snapshot=snapshot, online=online, jobs=jobs, host_ram=host_ram_bytes())
    failing = [p for p in plans if p.estimate.fits is False]
    data = {
        "builds": [p.to_json() for p in plans],
        "fits": not failing,
        "exit_code": EXIT_INVALID_INPUT if failing else 0,
    }
    out.result(data, lambda: _render(plans))
    for plan in plans:
        for warning in plan.estimate.warnings:
            out.warning(warning)
    if not failing:
        return
    if out.json_mode:
        raise cli.Exit(EXIT_INVALID_INPUT)
    from neuronc.fsutil import plural
    from neuronc.preflight import load_model_config, smallest_fitting_tp

    details = []
    fixes = []
    for p in failing:
        details.append(f"{p.label}: {p.estimate.summary()}")
        config = load_model_config(p.spec)
        better = smallest_fitting_tp(p.spec, config, p.backend) if config is not None else None
        if better is not None:
            fixes.append(f"raise tp_degree to {better} for {p.label} (the smallest supported degree that fits)")
    msg = f"{plural(len(failing), 'build')} cannot fit the target's memory per NeuronCore"
    hint = "; ".join(fixes) + ", " if fixes else "raise tp_degree, "
    raise PreflightError(msg, details=details, hint=hint + "or lower batch_size or sequence.max_length")


def _render(plans: list[Any]) -> None:
    from rich.markup import escape

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
    for p in plans:
        names = ", ".join(g["name"] for g in p.graphs)
        out.print(escape(f"{p.label}: {len(p.graphs)} graph(s): {names}"))
        if p.estimate.unknown_reason:
            out.print(escape(f"  pre-flight unknown: {p.estimate.unknown_reason}"))
        if p.store.get("note"):
            out.print(escape(f"  store: {p.store['note']}"))
        if p.store.get("other_toolchains"):
            out.print(escape(f"  store has this config for other toolchains: {', '.join(p.store['other_toolchains'])}"))
        if p.hf_cache.reason and p.hf_cache.status == "unknown":
            out.print(escape(f"  hf cache: {p.hf_cache.reason}"))


__all__ = ["plan_command"]
