"""The shipped demo profile compiled once per session (the `demo` fixture in conftest.py)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from neuronc.pipeline import BuildReport, compile_profiles

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Demo:
    root: Path
    profile: Path
    store: Path
    graph_cache: Path
    report: BuildReport

    @property
    def bundle(self) -> Path:
        return Path(self.report.bundle or "")

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / "tiny-llama"

    def env(self) -> dict[str, str]:
        return {**os.environ, "NEURONC_STORE": str(self.store), "NEURONC_GRAPH_CACHE": str(self.graph_cache)}

    def run_json(self, prompt: str, *args: str) -> dict[str, Any]:
        """`neuronc run BUNDLE --prompt PROMPT ARGS --json` in a fresh process: its JSON result."""
        result = subprocess.run(
            [sys.executable, "-m", "neuronc", "run", str(self.bundle), "--prompt", prompt, *args, "--json"],
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data


def shared_demo(root: Path) -> Demo:
    """``compile_demo(root)`` once for every process of the run that asks for the same ``root``.

    pytest-xdist's workers each hold the session fixtures: the first one to come compiles (the
    others wait on the lock), then they all read the same report and bundle.
    """
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    saved = root / "demo.pickle"
    with FileLock(str(root / "demo.lock")):
        if saved.exists():
            demo: Demo = pickle.loads(saved.read_bytes())
            return demo
        demo = compile_demo(root / "compiled")
        saved.write_bytes(pickle.dumps(demo))
        return demo


def compile_demo(root: Path) -> Demo:
    """The demo profile and model copied into ``root``, compiled into a private store and graph cache."""
    shutil.copytree(ROOT / "profiles" / "models" / "tiny-llama", root / "models" / "tiny-llama")
    profile = root / "tiny-llama-cpu.yaml"
    shutil.copy(ROOT / "profiles" / "tiny-llama-cpu.yaml", profile)
    store, graph_cache = root / "store", root / "graphs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURONC_GRAPH_CACHE", str(graph_cache))
        [report] = compile_profiles([profile], store=store, jobs=2)
    assert report.status == "built", report.error
    return Demo(root, profile, store, graph_cache, report)
