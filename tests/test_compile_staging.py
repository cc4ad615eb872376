"""A backend that leaves a symlink or a FIFO in the bundle's staging (issue 34, item 8).

The writer adopts what a backend writes into staging without telling it; a link or a special file
cannot be in a bundle. The compile fails with exit 3 naming the file (not a traceback, exit 1),
nothing is published, the staging directory is gone, and a FIFO is never opened (a run that
blocked on it would time out here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pipeline import write_profile, write_tiny_llama
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Path]:
    from plugins import pipeline_backend

    pipeline_backend.register()
    write_tiny_llama(tmp_path / "model")
    yield tmp_path
    pipeline_backend.unregister()


@pytest.mark.parametrize(
    ("leave", "where", "kind"), [("symlink", "artifacts", "a symbolic link"), ("fifo", "logs", "a FIFO")]
)
def test_a_link_or_fifo_left_in_staging_fails_the_compile_with_exit_3(
    pipeline: Path, leave: str, where: str, kind: str
) -> None:
    profile = write_profile(pipeline / "p.yaml", options={"leave": leave})
    store = pipeline / "store"
    out.reset()
    result = CliRunner().invoke(
        app, ["compile", str(profile), "--store", str(store), "--out", str(pipeline / "o"), "--json"]
    )
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    error = data["builds"][0]["error"]
    assert error["error"] == "compile_failed"
    assert (
        error["message"] == f"{where}/leftover: the backend left {kind} in the bundle; bundles hold regular files only"
    )
    assert "Traceback" not in result.output
    # Nothing published: no bundle in the store, no staging left, no --out copy.
    assert not list(store.rglob("manifest.json"))
    staging = store / ".staging"
    assert not staging.exists() or not any(staging.iterdir())
    assert not (pipeline / "o").exists()
