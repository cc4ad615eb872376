"""A full disk while a cached compiled graph is copied into the bundle is exit 5 naming the file system.

The inductor backend keeps compiled graphs in a cache (``NEURONC_GRAPH_CACHE``) and copies a hit
into the bundle. When the store's file system filled during that copy, the OSError became a
compile failure: exit 3, "see the compiler logs", and a failed-build log directory for a compile
that had not failed. It is now DiskFullError (exit 5) naming the file that did not fit and the
space it needs, with no staging directory left.

Slow: the first run compiles the two graphs for real (AOTInductor), to fill the graph cache; the
second, into a store on a 1 MiB tmpfs, only copies them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _pipeline import write_tiny_llama

pytestmark = pytest.mark.slow


def _compile(profile: Path, store: Path, graphs: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NEURONC_GRAPH_CACHE": str(graphs), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "neuronc", "compile", str(profile), "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=900,
    )


def test_a_full_disk_while_installing_a_cached_graph_is_exit_5(tmp_path: Path, tiny_disk: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = tmp_path / "p.yaml"
    data = {
        "model": {"id": "model"},
        "backend": "inductor",
        "target": "cpu",
        "amp": "fp32",
        "sequence": {"max_length": 32, "context_buckets": [32]},
        "weights": "presharded",
    }
    profile.write_text(yaml.safe_dump(data))
    graphs = tmp_path / "graphs"
    first = _compile(profile, tmp_path / "store", graphs, tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["builds"][0]["status"] == "built"

    store = tiny_disk / "store"  # room for the weights and model files, not for a compiled graph
    second = _compile(profile, store, graphs, tmp_path)
    assert second.returncode == 5, second.stderr
    assert "Traceback" not in second.stderr
    error = json.loads(second.stdout)["builds"][0]["error"]
    assert error["error"] == "disk_full", error
    assert str(tiny_disk) in error["message"] and ".pt2" in error["message"], error
    assert "compiler log" not in second.stderr
    staging = store / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    assert not list(store.rglob("manifest.json"))
