"""`neuronc compile`: profiles in, bundles in the store (and optionally in --out) out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli import _model_flags as mf
from neuronc.cli._app import command, command_failed
from neuronc.cli._executor import (
    ExecutorName,
    ExecutorOpt,
    RayAddressOpt,
    RayConnectTimeoutOpt,
    RayResourcesOpt,
    RayRetriesOpt,
    RayRuntimeEnvOpt,
    RaySharedStoreOpt,
    ray_settings,
    refuse_ray_options_without_ray,
)
from neuronc.cli._options import JsonOpt, StoreOpt, WideOpt
from neuronc.errors import NeuroncError

if TYPE_CHECKING:
    from neuronc.bundle.signing import BuiltSignatureJSON
    from neuronc.pipeline import BuildReport
    from neuronc.pipeline.local import Executor

OutDirOpt = Annotated[
    Path | None,
    cli.Option(
        "--out",
        "-o",
        help="Also copy the bundle here (the bundle itself for one build; one sub-directory per bundle for several).",
    ),
]
JobsOpt = Annotated[
    int | None,
    cli.Option(
        "--jobs",
        "-j",
        min=1,
        help="Graphs compiled in parallel (all builds together). Default: the cores plus one (two beyond two cores). "
        "With --executor ray: CPUs per build (default: its graphs, at most the largest node's CPUs).",
    ),
]
OnlyOpt = Annotated[
    list[str] | None,
    cli.Option("--only", help="Build only the build with this config hash (or a prefix of 6+ hex digits); repeatable."),
]
RevisionOpt = Annotated[
    str | None,
    cli.Option(
        "--revision",
        metavar="COMMIT",
        help="Key and build every Hub model at this commit (a matrix entry's `revision`) instead of resolving "
        "its revision again: with --only, the entry's key is built even after `main` moved. Empty: not given. "
        "With --model: the model's Hub revision (model.revision: a commit, tag or branch).",
    ),
]
ReportOpt = Annotated[
    Path | None,
    cli.Option("--report", help="Write the JSON report (one record per bundle) to this file, also on failure."),
]
SignOpt = Annotated[
    bool,
    cli.Option(
        "--sign",
        help="Sign each bundle once it is in the store (and its --out copy), with the key, certificate or "
        "Sigstore identity NEURONC_SIGNING_KEY / _CERT / _SIGSTORE names (docs/bundles.md).",
    ),
]
RequireHitOpt = Annotated[
    bool,
    cli.Option("--require-hit", help="Never compile: exit 6 when a build is not already in the store."),
]

_EPILOG = (
    "Examples: neuronc compile profiles/tiny-llama-cpu.yaml --out demo/ · "
    "neuronc compile profiles/*.yaml --json --report report.json · "
    "neuronc compile profiles/ (every profile of a directory) · "
    "neuronc compile p.yaml --only 3f9c2a1b7e04 --revision COMMIT (a key and revision from `neuronc matrix`) · "
    "neuronc compile p.yaml --executor ray --store s3://bucket/bundles (the Ray cluster at $RAY_ADDRESS) · "
    "neuronc compile --model ./my-model --backend inductor --target cpu --max-length 128 --save-profile p.yaml"
)
# Optional: `--model` and its flags describe a build without a profile.
ProfilesArg = Annotated[
    list[Path] | None, cli.Argument(help="Profile YAML files, or directories of them.", show_default=False)
]


@command(name="compile", epilog=_EPILOG)
def compile_command(
    profiles: ProfilesArg = None,
    store: StoreOpt = None,
    out_dir: OutDirOpt = None,
    jobs: JobsOpt = None,
    only: OnlyOpt = None,
    revision: RevisionOpt = None,
    report_path: ReportOpt = None,
    require_hit: RequireHitOpt = False,
    sign: SignOpt = False,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
    executor: ExecutorOpt = ExecutorName.LOCAL,
    ray_address: RayAddressOpt = None,
    ray_resources: RayResourcesOpt = None,
    ray_runtime_env: RayRuntimeEnvOpt = None,
    ray_shared_store: RaySharedStoreOpt = False,
    ray_retries: RayRetriesOpt = None,
    ray_connect_timeout: RayConnectTimeoutOpt = None,
    model: mf.ModelOpt = None,
    backend: mf.BackendOpt = None,
    target: mf.TargetOpt = None,
    tp: mf.TpOpt = None,
    batch: mf.BatchOpt = None,
    amp: mf.AmpOpt = None,
    max_length: mf.MaxLengthOpt = None,
    max_context_length: mf.MaxContextOpt = None,
    context_buckets: mf.ContextBucketsOpt = None,
    token_buckets: mf.TokenBucketsOpt = None,
    sdk: mf.SdkOpt = None,
    weights: mf.WeightsOpt = None,
    save_profile: mf.SaveProfileOpt = None,
    dry_run: mf.DryRunOpt = False,
) -> None:
    """Compile profiles (or the build --model and its flags describe) into bundles; a store hit compiles nothing."""
    from neuronc.pipeline import compile_profiles, run_report
    from neuronc.profile.from_flags import ProfileFlags

    out.configure(json_mode=json_out, wide=wide)
    # --revision is the model's Hub revision in both uses: with --model it is the profile's
    # model.revision (a commit, tag or branch); without, the commit every Hub model is keyed at.
    flags = ProfileFlags(
        model, revision if model is not None else None, None, backend, target, sdk, tp, batch, amp, max_length,
        max_context_length, context_buckets, token_buckets, weights,
    )  # fmt: skip
    if model is not None:
        revision = None
    refuse_ray_options_without_ray(
        executor,
        {
            "--ray-address": ray_address,
            "--ray-resources": ray_resources,
            "--ray-runtime-env": ray_runtime_env,
            "--ray-shared-store": ray_shared_store,
            "--ray-retries": ray_retries,
            "--ray-connect-timeout": ray_connect_timeout,
        },
    )
    runner: Executor | None = None
    if executor == ExecutorName.RAY:
        from neuronc.pipeline.farm import RayExecutor

        settings = ray_settings(
            address=ray_address,
            resources=ray_resources,
            runtime_env=ray_runtime_env,
            shared_store=ray_shared_store,
            retries=ray_retries,
            jobs=jobs,
            connect_timeout=ray_connect_timeout,
        )
        runner = RayExecutor(settings)
    reports: list[BuildReport] = []
    signatures: list[BuiltSignatureJSON] = []
    unsigned: list[str] = []

    def on_report(report: BuildReport) -> None:
        reports.append(report)
        _announce(report)

    try:
        profiles = mf.profiles_to_build(profiles, flags, save_profile, dry_run)  # a flags problem: the report's error
        if profiles is None:
            return  # --dry-run printed the profile
        from neuronc.cli._signing import signed_bundles, signer_from_environment

        signer = signer_from_environment() if sign else None  # a key that cannot sign: exit 2 now, not after
        if out_dir is not None:
            from neuronc.bundle.signing import signature_required
            from neuronc.pipeline.out import required_trust

            if signature_required(False):  # a store hit's --out copy is checked: nothing to trust is exit 2 now
                required_trust()
        with out.progress() as sink:  # SIGTERM raises KeyboardInterrupt here too (cli._app.handle_errors)
            # The builds of a matrix end in any order (they run side by side): the report lists them
            # in the profiles' order.
            reports[:] = compile_profiles(
                profiles,
                store=store,
                out_dir=out_dir,
                jobs=jobs,
                only=only,
                revision=revision,
                require_hit=require_hit,
                progress=sink,
                on_report=on_report,
                log=out.info,
                executor=runner,
                signer=signer,
            )
        if signer is not None:
            signatures, unsigned = signed_bundles(reports)
    except (KeyboardInterrupt, NeuroncError) as exc:
        # The report keeps its shape on a failure before (or between) builds: the builds so far, and
        # the error or `interrupted: true`; with --json it is the one document (command_failed's report).
        error = exc if isinstance(exc, NeuroncError) else None
        data = run_report(reports, interrupted=error is None, error=error)
        _write_report(report_path, data)
        raise cli.Exit(command_failed(exc, report=data)) from None
    data = run_report(reports)
    refusal = None
    if sign:
        from neuronc.cli._signing import unsigned_hits_error

        data["signatures"] = signatures
        if unsigned:
            refusal = unsigned_hits_error(unsigned)
            data["unsigned"] = unsigned
            data["exit_code"] = data["exit_code"] or refusal.exit_code
    _write_report(report_path, data)
    out.result(data, lambda: _render(reports))
    for report in reports:
        _print_failure(report)
    if refusal is not None:
        out.explain(refusal)
    if data["exit_code"]:
        raise cli.Exit(data["exit_code"])


def _announce(report: BuildReport) -> None:
    """One line on stderr as each build ends (the table comes at the end)."""
    from neuronc.pipeline import BuildStatus

    where = report.out or report.bundle
    if report.status == BuildStatus.HIT:
        out.success(f"{report.label}: store hit {(report.config_hash or '')[:12]} → {where}")
    elif report.status == BuildStatus.BUILT:
        out.success(f"{report.label}: built {(report.config_hash or '')[:12]} in {report.wall_seconds:.1f}s → {where}")
    elif report.status == BuildStatus.REBOUND:
        origin = (report.rebound_from or {}).get("config_hash", "")[:12]
        key = (report.config_hash or "")[:12]
        out.success(f"{report.label}: rebound {key} (graphs from {origin}) in {report.wall_seconds:.1f}s → {where}")
    elif report.status == BuildStatus.SKIPPED:
        out.warning(f"{report.label}: skipped")
    else:
        out.warning(f"{report.label}: failed (exit {report.exit_code})")
    for message in report.messages:
        out.info(f"{report.label}: {message}")


def _render(reports: list[BuildReport]) -> None:
    from neuronc.pipeline import BuildStatus

    rows = [
        [
            r.label,
            r.status,
            (r.config_hash or "")[:12],
            _graphs_cell(r),
            f"{r.wall_seconds:.2f}s",
            _mib(r.peak_rss_bytes),
        ]
        for r in reports
    ]
    out.table(
        ["build", "status", "config", "graphs", "wall", "peak RSS"],
        rows,
        justify={"wall": "right", "peak RSS": "right", "graphs": "right"},
        optional=["config", "graphs", "peak RSS"],
    )
    for r in reports:
        if r.status in (BuildStatus.BUILT, BuildStatus.REBOUND) and r.stages:
            out.print(f"{r.label} stages: " + " · ".join(f"{s.name} {s.seconds:.2f}s" for s in r.stages))
    for r in reports:
        if r.out or r.bundle:
            out.print(f"{r.label} → {r.out or r.bundle}")


def _graphs_cell(report: BuildReport) -> str:
    from neuronc.pipeline import BuildStatus

    if not report.graphs:
        return ""
    if report.status == BuildStatus.HIT:
        return str(len(report.graphs))
    if report.status == BuildStatus.REBOUND:
        return f"{len(report.graphs)} (rebound)"
    cached = sum(1 for g in report.graphs if g.cache_hit)
    return f"{len(report.graphs)} ({cached} cached)" if cached else str(len(report.graphs))


def _mib(value: int | None) -> str:
    return "" if value is None else f"{value / (1024 * 1024):.0f} MiB"


def _print_failure(report: BuildReport) -> None:
    """Each failed build's error on stderr: message, details (the log tail), hint."""
    if report.error is not None:
        # Errors raised by the pipeline already start with the build's label; name it once.
        named = report.error.message.startswith(f"{report.label}:")
        out.explain(report.error, prefix="" if named else f"{report.label}: ")


def _write_report(path: Path | None, data: Mapping[str, object]) -> None:
    """Write the report atomically (a CI step reading it never sees half a file)."""
    if path is None:
        return
    from neuronc._output import to_json_text
    from neuronc.fsutil import write_output

    write_output(path, to_json_text(data).encode("utf-8"), what="the report")


__all__ = ["compile_command"]
