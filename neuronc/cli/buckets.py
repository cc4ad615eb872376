"""`neuronc buckets PROFILE --traffic FILE`: the sequence buckets the traffic needs, chosen exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt, StoreOpt

if TYPE_CHECKING:
    from collections import Counter

    from neuronc.buckets import Analysis, Figures

_EPILOG = (
    "Examples: neuronc buckets profiles/tiny-llama-cpu.yaml --traffic requests.jsonl · "
    "neuronc buckets p.yaml --traffic guidellm-report.json --max-graphs 3 --write · "
    "neuronc buckets p.yaml --traffic 'prompt_tokens=512,prompt_tokens_stdev=128,output_tokens=256' --json. "
    'Traffic: JSONL of {"prompt_tokens": N, "output_tokens": M} or {"prompt": "..."}, a GuideLLM '
    "benchmark report, or a GuideLLM synthetic data spec (a file, or key=value,... itself). "
    "See docs/profiles.md#choosing-buckets."
)


@command(name="buckets", epilog=_EPILOG)
def buckets_command(
    profile: Annotated[Path, cli.Argument(help="A profile YAML file.", show_default=False)],
    traffic: Annotated[
        Path,
        cli.Option(
            "--traffic", help="The requests to serve (JSONL, GuideLLM report or data spec).", show_default=False
        ),
    ],
    max_graphs: Annotated[
        int, cli.Option("--max-graphs", "-k", min=1, max=64, help="Buckets (graphs) of each kind at most.")
    ] = 4,
    build: Annotated[int, cli.Option("--build", min=0, help="Which build of a matrix profile.")] = 0,
    write: Annotated[bool, cli.Option("--write", help="Set the suggested buckets in the profile, in place.")] = False,
    plot: Annotated[
        Path | None, cli.Option("--plot", help="Also draw the histograms to a .png or .svg (needs matplotlib).")
    ] = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Suggest context and token-generation buckets for real traffic: least padding with K graphs."""
    from neuronc.buckets import analyse_profile

    out.configure(json_mode=json_out)
    analysis = analyse_profile(profile, traffic, build=build, max_graphs=max_graphs, store=store)
    plotted = None
    if plot is not None:
        from neuronc.buckets.draw import write_plot

        write_plot(plot, _panels(analysis))
        plotted = str(plot)
    written = False
    suggested = analysis.suggested
    if write and (suggested.context_buckets, suggested.token_buckets) != _written_now(analysis):
        from neuronc.buckets.write import write_buckets

        write_buckets(profile, suggested.context_buckets, suggested.token_buckets)
        written = True
    data = {**analysis.to_json(), "written": written, "plot": plotted}
    out.result(data, lambda: _render(analysis, written, plotted, profile))


def _written_now(analysis: Analysis) -> tuple[tuple[int, ...], tuple[int, ...]]:
    seq = analysis.spec.sequence
    return seq.context_buckets, seq.token_buckets


def _panels(analysis: Analysis) -> list[tuple[str, Counter[int], tuple[int, ...], tuple[int, ...]]]:
    current, suggested = analysis.current, analysis.suggested
    return [
        ("prompt tokens (context buckets)", analysis.context_hist, current.context_buckets, suggested.context_buckets),
        (
            "decode steps by KV length (token buckets)",
            analysis.token_hist,
            current.token_buckets,
            suggested.token_buckets,
        ),
    ]


def _render(analysis: Analysis, written: bool, plotted: str | None, profile: Path) -> None:
    from rich.markup import escape

    from neuronc.buckets.draw import text_histogram

    t = analysis.traffic
    spec = analysis.spec
    out.print(escape(f"{spec.label}: {spec.backend}, {len(t.requests)} requests from {t.source} ({t.format})"))
    for name, rule in (("context", analysis.rules.context), ("token", analysis.rules.token)):
        out.print(escape(f"  {name} buckets: at most {rule.limit}; {rule.source}"))
    for title, histogram, current, suggested in _panels(analysis):
        out.code("\n".join(text_histogram(histogram, current, suggested, title=title)))
    columns = ["", "context buckets", "token buckets", "padded", "beyond", "graphs", "compile", "padded tokens"]
    rows = [
        [*_row(name, f), str(f.padded_tokens)]
        for name, f in (("current", analysis.current), (f"suggested (K={analysis.max_graphs})", analysis.suggested))
    ]
    out.table(columns, rows, justify={c: "right" for c in columns[3:]}, optional=["padded tokens"])
    out.table(
        ["K", "context buckets", "token buckets", "padded", "beyond", "graphs", "compile"],
        [[str(k), *_row("", f)[1:]] for k, f in enumerate(analysis.curve, start=1)],
        title="the curve: best buckets with at most K graphs of each kind",
        justify={c: "right" for c in ("K", "padded", "beyond", "graphs", "compile")},
    )
    if analysis.suggested.compile_seconds is None:
        out.print(escape(f"compile time: {analysis.suggested.compile_basis}"))
    else:
        out.print(escape(f"compile time {analysis.suggested.compile_basis}"))
    for note in analysis.notes:
        out.print(escape(f"note: {note}"))
    if plotted:
        out.print(escape(f"plot: {plotted}"))
    if written:
        out.success(f"wrote the suggested buckets to {profile}")


def _row(name: str, f: Figures) -> list[str]:
    seconds = "?" if f.compile_seconds is None else f"{f.compile_seconds:.0f} s"
    return [
        name,
        ", ".join(map(str, f.context_buckets)),
        ", ".join(map(str, f.token_buckets)),
        f"{f.padded_share:.1%}",
        f"{f.beyond_share:.1%}",
        str(f.graphs),
        seconds,
    ]


__all__ = ["buckets_command"]
