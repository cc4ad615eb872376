"""Tables at 80 and 120 columns: readable, and no cell ever broken inside a word.

``out.table`` is checked directly (hypothesis draws cells of words, paths and hashes) and through
the commands that print tables, rendered as a terminal of that width would show them (COLUMNS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronc._output import fit_columns, out
from neuronc.cli import app

REPO = Path(__file__).resolve().parent.parent
WIDTHS = (80, 120)


def unbroken(text: str, words: Iterable[str], width: int) -> list[str]:
    """Words (that fit a line at all) that do not appear whole (not inside a longer token) on a line of ``text``."""
    lines = text.splitlines()
    return [
        w for w in words if w and not any(re.search(rf"(?<![\w./-]){re.escape(w)}(?![\w./-])", line) for line in lines)
    ]


def words_of(cells: Iterable[str]) -> set[str]:
    return {w for cell in cells for w in cell.split()}


def render(columns: list[str], rows: list[list[str]], width: int, monkeypatch: pytest.MonkeyPatch, **kw: object) -> str:
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    monkeypatch.setattr(out, "_stdout", Console(file=buffer, width=width, highlight=False))
    out.table(columns, rows, **kw)  # type: ignore[arg-type]
    return buffer.getvalue()


token = st.one_of(
    st.sampled_from(["profiles/llama3.1-8b-instruct-nxdi-inf2.yaml", "meta-llama/Meta-Llama-3.1-8B", "16.0 GiB"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./", min_size=1, max_size=40),
)
cell = st.lists(token, min_size=0, max_size=4).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(
    columns=st.lists(
        st.sampled_from(["build", "status", "config hash", "model", "backend · target", "size"]),
        min_size=1,
        max_size=6,
        unique=True,
    ),
    data=st.data(),
)
def test_no_cell_is_broken_inside_a_word(columns: list[str], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(cell, min_size=len(columns), max_size=len(columns)), max_size=5))
    for width in WIDTHS:
        with pytest.MonkeyPatch.context() as mp:
            text = render(columns, rows, width, mp, optional=columns[2:])
        layout = fit_columns(columns, rows, width, optional=columns[2:])
        # Dropped optional columns are not shown; stacked rows show every column, headed by the
        # first cell without the first column's name.
        shown = range(len(columns)) if layout is None else layout[0]
        if layout is None:
            names = [columns[i] for row in rows for i in shown if i > 0 and row[i]]
        else:
            names = [columns[i] for i in shown]
        assert not unbroken(text, words_of([*(row[i] for row in rows for i in shown), *names]), width), text
        assert all(fits(line, width) for line in text.splitlines()), text


def test_full_table_when_it_fits_fewer_columns_then_stacked(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = ["build", "status", "config", "host compile"]
    rows = [["profiles/tiny-llama-cpu.yaml", "hit", "6bc7a660f6f4", "2.0 GiB"]]
    assert fit_columns(columns, rows, 120) == ([0, 1, 2, 3], [28, 6, 12, 12])
    # Too narrow for every column: the optional one goes first.
    assert fit_columns(columns, rows, 55, optional=["host compile"]) == ([0, 1, 2], [28, 6, 12])
    # Too narrow even then: rows are printed stacked, nothing is cut.
    assert fit_columns(columns, rows, 30, optional=["host compile"]) is None
    text = render(columns, rows, 30, monkeypatch, optional=["host compile"])
    assert "profiles/tiny-llama-cpu.yaml" in text and "  config: 6bc7a660f6f4" in text
    # --wide: the full table whatever the terminal.
    monkeypatch.setattr(out, "wide", True)
    assert fit_columns(columns, rows, 30, wide=True) == ([0, 1, 2, 3], [28, 6, 12, 12])


# -- the commands that print tables ----------------------------------------------------------------


def invoke(runner: CliRunner, args: list[str], width: int) -> str:
    out.reset()
    result = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert result.exit_code in (0, 2, 6), result.output
    return result.stdout


def json_values(data: object) -> Iterable[str]:
    """Every scalar in a JSON document, as text (what a table might show)."""
    if isinstance(data, dict):
        for value in data.values():
            yield from json_values(value)
    elif isinstance(data, list):
        for value in data:
            yield from json_values(value)
    elif data is not None:
        yield str(data)


def fits(line: str, width: int) -> bool:
    """A line fits the terminal, or is one word longer than it (a long path, never cut)."""
    return len(line) <= width or len(line.split()) == 1


def check_command(runner: CliRunner, args: list[str] | Callable[[int], list[str]], expected: Iterable[str]) -> None:
    wanted = [w for w in words_of(expected) if re.fullmatch(r"[\w./:@-]+", w)]
    for width in WIDTHS:
        text = invoke(runner, args(width) if callable(args) else args, width)
        # Code to copy (inspect's load snippet) is printed as it is, never wrapped.
        prose = text.split("\nload:\n", 1)[0]
        assert all(fits(line, width) for line in prose.splitlines()), text
        missing = unbroken(text, wanted, width)
        assert not missing, f"at {width} columns, broken or missing: {missing}\n{text}"


SHIPPED = sorted((REPO / "profiles").glob("*.yaml"))


def test_validate_tables(runner: CliRunner) -> None:
    for profile in SHIPPED:
        data = json.loads(invoke(runner, ["validate", str(profile), "--json"], 200))
        graphs = [g["name"] for p in data["profiles"] for b in p["builds"] for g in b["plan"]["graphs"]]
        check_command(runner, ["validate", str(profile)], [str(profile), *graphs])


def test_plan_table(runner: CliRunner, tmp_path: Path) -> None:
    args = ["plan", *map(str, SHIPPED), "--store", str(tmp_path / "store")]
    data = json.loads(invoke(runner, [*args, "--json"], 200))
    expected = [b["name"] or b["model"] for b in data["builds"]] + [b["key"] for b in data["builds"]]
    check_command(runner, args, expected)


def test_hash_and_backends_tables(runner: CliRunner) -> None:
    data = json.loads(invoke(runner, ["hash", *map(str, SHIPPED), "--json"], 200))
    check_command(runner, ["hash", *map(str, SHIPPED)], [h["config_hash"] for h in data["hashes"]])
    data = json.loads(invoke(runner, ["backends", "--json"], 200))
    names = [b["name"] for b in data["backends"]]
    check_command(runner, ["backends"], names)


def test_compile_summary_inspect_store_and_split_tables(runner: CliRunner, tmp_path: Path) -> None:
    from _pipeline import write_profile, write_tiny_llama
    from plugins import pipeline_backend

    pipeline_backend.register()
    try:
        write_tiny_llama(tmp_path / "model")
        profile = write_profile(tmp_path / "a-profile-with-a-rather-long-name-for-the-summary.yaml")
        store = tmp_path / "store"
        args = ["compile", str(profile), "--store", str(store)]
        [build] = json.loads(invoke(runner, [*args, "--json"], 200))["builds"]
        check_command(runner, args, [build["profile"], build["config_hash"][:12], "hit"])

        bundle = build["bundle"]
        data = json.loads(invoke(runner, ["inspect", bundle, "--json"], 200))
        expected = [g["name"] for g in data["graphs"]] + [s["file"] for s in data["shards"]] + list(data["toolchain"])
        check_command(runner, ["inspect", bundle], expected)

        listed = json.loads(invoke(runner, ["store", "list", "--store", str(store), "--json"], 200))
        entries = listed["bundles"] if isinstance(listed, dict) else listed
        check_command(runner, ["store", "list", "--store", str(store)], [e["key"] for e in entries])
    finally:
        pipeline_backend.unregister()

    split = ["split", str(tmp_path / "model"), "--tp", "1", "--out", str(tmp_path / "split")]
    data = json.loads(invoke(runner, [*split, "--json"], 200))
    files = [s["file"] for s in data["shards"]]
    check_command(runner, lambda width: [*split[:-1], str(tmp_path / f"split-{width}")], files)


def test_cache_lookup_table(runner: CliRunner) -> None:
    snapshot = REPO / "tests" / "fixtures" / "hf-neuron-cache" / "snapshot"
    model = REPO / "tests" / "fixtures" / "hf-neuron-cache" / "models" / "example-org" / "tiny-llama"
    args = ["cache-lookup", str(model), "--snapshot", str(snapshot)]
    data = json.loads(invoke(runner, [*args, "--json"], 200))
    shapes = {f"{e['sequence_length']}" for e in data["entries"]} | {e["compiler_version"] for e in data["entries"]}
    assert shapes
    check_command(runner, args, shapes)
    # The model id gives way at 80 columns (named below the table); at 120 it is shown.
    wide = invoke(runner, args, 120)
    assert not unbroken(wide, {e["model_id"] for e in data["entries"]}, 120)


def test_text_like_an_emoji_code_prints_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """A name such as ``org/:smile:-7b`` is a name: Rich's emoji codes are off on both streams."""
    out.reset()
    out.print("model org/:smile:-7b")
    out.info("store /data/:rocket:/bundles")
    captured = capsys.readouterr()
    assert "org/:smile:-7b" in captured.out
    assert "/data/:rocket:/bundles" in captured.err


def test_wide_prints_the_full_table_even_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """--wide / NEURONC_WIDE: the natural table, not one squeezed into the terminal (Rich clamps
    print(width=) to the console's width, so a wide table used to be folded anyway)."""
    columns = ["build", "status", "config", "host compile"]
    rows = [["profiles/tiny-llama-cpu.yaml", "hit", "6bc7a660f6f4", "2.0 GiB"]]
    monkeypatch.setattr(out, "wide", True)
    text = render(columns, rows, 40, monkeypatch)
    [header, _rule, row] = text.splitlines()[:3]
    assert "host compile" in header and "profiles/tiny-llama-cpu.yaml" in row and "2.0 GiB" in row
    assert len(row.rstrip()) > 40


def test_what_a_narrow_table_leaves_out_is_said_and_constant_columns_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = ["key", "model", "neuronx-cc", "notes"]
    rows = [
        [f"k{i}", "meta-llama/Meta-Llama-3.1-8B-Instruct", f"2.21.{i}", f"annotation-number-{i} " * 2] for i in range(3)
    ]
    rendered = render(columns, rows, 36, monkeypatch, optional=["neuronx-cc", "notes"])
    header = rendered.splitlines()[0]
    text = " ".join(rendered.split())  # the lines below the table wrap at spaces
    # The model is the same on every row: it goes first and is said once; the compiler version, which
    # tells the rows apart, stays; the note (dropped next) is named below the table.
    assert "model" not in header and "neuronx-cc" in header
    assert "on every row: model: meta-llama/Meta-Llama-3.1-8B-Instruct" in text
    assert "not shown at 36 columns: notes (--wide shows every column)" in text


def test_at_80_columns_the_telling_columns_stay(runner: CliRunner) -> None:
    snapshot = REPO / "tests" / "fixtures" / "hf-neuron-cache" / "snapshot"
    model = REPO / "tests" / "fixtures" / "hf-neuron-cache" / "models" / "example-org" / "tiny-llama"
    lookup = invoke(runner, ["cache-lookup", str(model), "--snapshot", str(snapshot)], 80)
    header = next(line for line in lookup.splitlines() if line.startswith("bs "))
    assert "neuronx-cc" in header and "optimum-neuron" in header
    assert "not shown at 80 columns:" in lookup or "on every row:" in lookup
    listed = invoke(runner, ["profiles", "list"], 80)
    assert "backend" in listed.splitlines()[0] and "transformers-neuronx" in listed
    assert "not shown at 80 columns: description" in listed
