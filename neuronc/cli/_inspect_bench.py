"""`neuronc inspect`'s section on a bundle's stored `neuronc bench` results (``neuronc.benchmark.results``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._report import table_cell as _cell

if TYPE_CHECKING:
    from neuronc.benchmark.results import StoredRunJSON
    from neuronc.bundle import Manifest


BenchStoreOpt = Annotated[
    str | None,
    cli.Option(
        "--store",
        metavar="DIR|URL",
        help="The store whose `neuronc bench` results for this bundle to show. Default: the local store the "
        "bundle lies in, if it lies in one.",
    ),
]


def stored_runs(bundle: Path, manifest: Manifest, location: str | None) -> list[StoredRunJSON] | None:
    """The bundle's stored `neuronc bench` runs: from ``--store``, else from the local store it lies in;
    None when there is no store to ask."""
    from neuronc.benchmark.results import store_holding, summary
    from neuronc.store import open_store

    store = open_store(location) if location else store_holding(bundle, manifest)
    return None if store is None else summary(store, manifest.config_hash, manifest.toolchain_key)


def render_stored_runs(runs: list[StoredRunJSON] | None) -> None:
    if not runs:
        if runs is not None:
            out.print("bench      no stored results (`neuronc bench` stores them with the bundle)")
        return
    rows = [
        [
            _cell(r["kind"]),
            _cell(r["host"]),
            _cell(r["measured_at"]),
            _cell(r["guidellm_version"]),
            r["benchmarks"],
            "-" if r["max_requests_per_second"] is None else f"{r['max_requests_per_second']:.3g}",
            "-" if r["time_to_ready_s"] is None else f"{r['time_to_ready_s']:.1f}",
        ]
        for r in runs
    ]
    out.table(
        ["run", "host", "measured", "GuideLLM", "benchmarks", "max req/s", "ready s"],
        rows,
        title="stored bench results",
        justify={"benchmarks": "right", "max req/s": "right", "ready s": "right"},
        optional=["GuideLLM", "ready s"],
    )


__all__ = ["BenchStoreOpt", "render_stored_runs", "stored_runs"]
