"""`neuronc bench PROFILE...|BUNDLE... --slo ...`: serve each bundle, measure it with GuideLLM, pick one."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command, command_failed
from neuronc.cli._options import JsonOpt, StoreOpt
from neuronc.errors import InvalidInputError, NeuroncError

if TYPE_CHECKING:
    from neuronc.benchmark.run import BenchBundle
    from neuronc.bundle import Manifest

TargetsArg = Annotated[
    list[Path],
    cli.Argument(help="Profile YAML files (compiled first, or taken from the store), or bundle directories."),
]
SloOpt = Annotated[
    str,
    cli.Option(
        "--slo", help='Objectives every bundle is held to, e.g. "ttft_p99<=2s,itl_p99<=50ms".', show_default=False
    ),
]
DataOpt = Annotated[
    str | None,
    cli.Option("--data", metavar="SPEC", help="GuideLLM synthetic data, e.g. prompt_tokens=256,output_tokens=64."),
]
TrafficOpt = Annotated[
    Path | None,
    cli.Option(
        "--traffic", help="A traffic file (JSONL, a GuideLLM report or data spec), as `buckets --traffic` reads."
    ),
]
OutOpt = Annotated[Path, cli.Option("--out", help="Where bench.json, bench.html and GuideLLM's reports go.")]
GuidellmOpt = Annotated[
    str | None,
    cli.Option(
        "--guidellm", metavar="PATH", help="The GuideLLM 0.8.1 program (default: $NEURONC_GUIDELLM, else guidellm)."
    ),
]
PriceOpt = Annotated[
    list[str] | None,
    cli.Option("--price", metavar="INSTANCE=USD", help="Override an instance's price per hour (repeatable)."),
]


def _describe(manifests: list[Manifest]) -> list[str]:
    """What tells the bundles apart: the fields that differ (``batch 4, ctx 32/64``), else their keys."""

    def sequence(m: Manifest, key: str) -> object:
        found = m.profile.get("sequence")
        return found.get(key) if isinstance(found, dict) else None

    fields: dict[str, Callable[[Manifest], object]] = {
        "batch": lambda m: m.batch_size,
        "tp": lambda m: m.tp_degree,
        "ctx": lambda m: (
            "/".join(str(b) for b in buckets) if isinstance(buckets := sequence(m, "context_buckets"), list) else None
        ),
        "len": lambda m: sequence(m, "max_length"),
        "amp": lambda m: m.profile.get("amp"),
    }
    differing = [name for name, get in fields.items() if len({str(get(m)) for m in manifests}) > 1]
    names = []
    for manifest in manifests:
        parts = [f"{name} {fields[name](manifest)}" for name in differing]
        names.append(", ".join(parts) if parts else manifest.config_hash[:12])
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[index] = f"{name} ({manifests[index].config_hash[:8]})"
    return names


def _targets(targets: list[Path], store: str | None) -> tuple[list[BenchBundle], list[tuple[str, str]]]:
    """Bundles to measure (profiles compiled first, or found in the store) and the builds that failed."""
    from neuronc.benchmark.run import BenchBundle
    from neuronc.bundle import MANIFEST_NAME, read_manifest
    from neuronc.pipeline import compile_profiles

    paths: list[Path] = []
    failed: list[tuple[str, str]] = []
    profiles = [t for t in targets if not (t / MANIFEST_NAME).is_file()]
    for target in targets:
        if (target / MANIFEST_NAME).is_file():
            paths.append(target)
    if profiles:
        with out.progress() as sink:
            reports = compile_profiles(profiles, store=store, progress=sink, log=out.info)
        for report in reports:
            if report.bundle:
                paths.append(Path(report.bundle))
            else:
                failed.append(
                    (
                        f"{Path(report.profile).name}#{report.build_index}",
                        report.error.message if report.error else str(report.status),
                    )
                )
    if not paths and not failed:
        raise InvalidInputError("no bundles to measure", hint="give profiles or bundle directories")
    manifests = [read_manifest(p) for p in paths]
    names = _describe(manifests) if manifests else []
    return [BenchBundle(name, path) for name, path in zip(names, paths, strict=True)], failed


_EPILOG = (
    'Example: neuronc bench profiles/tiny-llama-bench.yaml --slo "ttft_p99<=500ms,itl_p99<=50ms" --out bench/. '
    "Exit 0 with a pick, 8 when no bundle meets the SLO (the closest one named). See docs/choose-a-bundle.md."
)


@command(name="bench", epilog=_EPILOG)
def bench_command(
    targets: TargetsArg,
    slo: SloOpt,
    data: DataOpt = None,
    traffic: TrafficOpt = None,
    store: StoreOpt = None,
    out_dir: OutOpt = Path("bench-results"),
    guidellm: GuidellmOpt = None,
    rerun: Annotated[bool, cli.Option("--rerun", help="Measure again, replacing stored results.")] = False,
    allow_compile: Annotated[
        bool, cli.Option("--allow-compile", help="Also measure bundles the verdict says would compile at start.")
    ] = False,
    price: PriceOpt = None,
    instance_type: Annotated[
        str | None, cli.Option("--instance-type", help="Neuron bundles: the instance they are served on.")
    ] = None,
    image: Annotated[
        str | None, cli.Option("--image", help="Neuron bundles: the serving image (as deploy --image).")
    ] = None,
    sweep_size: Annotated[int, cli.Option("--sweep-size", min=2, help="Benchmarks in GuideLLM's rate sweep.")] = 5,
    seconds: Annotated[
        float, cli.Option("--seconds", min=1.0, help="Seconds per benchmark and per goodput probe.")
    ] = 10.0,
    probes: Annotated[int, cli.Option("--probes", min=1, help="Most probes of GuideLLM's goodput search.")] = 6,
    health_timeout: Annotated[
        float, cli.Option("--health-timeout", min=1.0, help="Seconds a stack may take to answer /health.")
    ] = 300.0,
    tokenizer: Annotated[
        str | None, cli.Option("--tokenizer", help="Tokenizer for GuideLLM's synthetic data (default: the bundle's).")
    ] = None,
    html_report: Annotated[bool, cli.Option("--html/--no-html", help="Write bench.html (needs plotly).")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Serve each bundle, measure it with GuideLLM (a rate sweep, its goodput search), pick the one meeting the SLO."""
    from neuronc.benchmark import decide, parse_slo
    from neuronc.benchmark.guidellm import find_guidellm, traffic_from
    from neuronc.benchmark.pick import BundleResult
    from neuronc.benchmark.prices import parse_prices
    from neuronc.benchmark.run import BenchOptions, bench
    from neuronc.store import open_store

    out.configure(json_mode=json_out)
    objectives = parse_slo(slo)
    prices = parse_prices(price or [])
    if data is not None and traffic is not None:
        raise InvalidInputError("--data and --traffic both give the traffic; give one of them")
    load = traffic_from(data if data is not None else str(traffic)) if (data or traffic) else None
    program = find_guidellm(guidellm)
    bundle_store = open_store(store)
    options = BenchOptions(
        objectives, load, sweep_size, seconds, probes, health_timeout, rerun=rerun, allow_compile=allow_compile,
        prices=prices, instance_type=instance_type, image=image, tokenizer=tokenizer,
    )  # fmt: skip
    bundles, failed = _targets(targets, store)
    rows: list[BundleResult] = [BundleResult(name, "", error=f"compile failed: {why}") for name, why in failed]
    paths = {b.name: str(b.path) for b in bundles}
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        bench(bundles, options, program, bundle_store, out_dir / "runs", out.info, rows.append)
    except KeyboardInterrupt as exc:
        decision = decide(rows, objectives)
        data_doc = _write(out_dir, rows, decision, paths, program.version, prices, html=False, interrupted=True)
        raise cli.Exit(command_failed(exc, report=data_doc)) from None
    decision = decide(rows, objectives)
    document = _write(out_dir, rows, decision, paths, program.version, prices, html=html_report)
    _finish(document, rows, decision)


def _write(
    out_dir: Path,
    rows: list[BundleResult],
    decision: Decision,
    paths: dict[str, str],
    version: str,
    prices: dict[str, float],
    *,
    html: bool,
    interrupted: bool = False,
) -> JSONObject:
    import json

    from neuronc.benchmark.summary import document
    from neuronc.fsutil import write_output

    page = None
    if html and importlib.util.find_spec("plotly") is None:
        out.warning("bench.html not written: the HTML report needs plotly (pip install 'neuronc[bench]')")
    elif html:
        from neuronc.benchmark.page import render_page

        page = out_dir / "bench.html"
        text = render_page(rows, decision, guidellm_version=version, prices=prices)
        write_output(page, text.encode("utf-8"), what="the HTML report")
    doc: JSONObject = document(
        rows, decision, paths=paths, guidellm_version=version, prices=prices,
        html=None if page is None else str(page), interrupted=interrupted,
    )  # fmt: skip
    write_output(out_dir / "bench.json", (json.dumps(doc, indent=2) + "\n").encode("utf-8"), what="bench.json")
    return doc


def _finish(document: JSONObject, rows: list[BundleResult], decision: Decision) -> None:
    from neuronc.benchmark.summary import TABLE_COLUMNS, table_rows
    from neuronc.errors import SloNotMetError

    def render() -> None:
        out.table(
            TABLE_COLUMNS, table_rows(rows, decision), title=f"SLO {decision.slo.label()}", optional=("note", "ready")
        )
        out.print(decision.reason)
        if document.get("html"):
            out.print(f"report: {document['html']}")

    failure: NeuroncError | None = None
    if decision.pick is None:
        hint = "loosen the SLO, or add bundles (a smaller batch, more context buckets) to the matrix"
        failure = SloNotMetError(decision.reason, hint=hint)
    from neuronc.cli._report import finish_report

    finish_report(document, render, failure)


if TYPE_CHECKING:
    from neuronc.benchmark.pick import BundleResult, Decision
    from neuronc.cli._report import JSONObject

__all__ = ["bench_command"]
