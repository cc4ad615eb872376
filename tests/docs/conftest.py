"""Fixtures for the documentation tests: one workspace around the session's compiled demo."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _demo import Demo

ROOT = Path(__file__).resolve().parents[2]
HF_FIXTURE = ROOT / "tests" / "fixtures" / "hf-neuron-cache"


@dataclass
class Workspace:
    """A directory laid out as a user's would be after the quickstart, with its own store and caches.

    The graph cache is the session demo's, so a compile of the demo profile here builds a bundle
    in about a second (every graph is a cache hit) instead of a minute.
    """

    root: Path
    demo: Demo
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, *args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`neuronc ARGS` as a user runs it: a fresh process, the console-script entry point."""
        return subprocess.run(
            [sys.executable, "-m", "neuronc", *map(str, args)],
            cwd=cwd or self.root,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def invoke(self, *args: str | Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`neuronc ARGS` in this process (the console script's own ``main``), as ``run`` sees it.

        The environment, the working directory and stdout/stderr are the workspace's for the call
        only; the output module is reset around it. Hundreds of times faster than a fresh
        interpreter: what does not depend on process start-up runs here.
        """
        from neuronc._output import out
        from neuronc.cli import main

        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        stdout, stderr = io.StringIO(), io.StringIO()
        os.environ.clear()
        os.environ.update({**self.env, **(env or {})})
        os.chdir(self.root)
        out.reset()
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    main([str(a) for a in args])
                    code: int = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            out.reset()
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        return subprocess.CompletedProcess(["neuronc", *map(str, args)], code, stdout.getvalue(), stderr.getvalue())

    def json(self, *args: str | Path, code: int = 0, **kwargs: Any) -> Any:
        proc = self.run(*args, **kwargs)
        assert proc.returncode == code, f"exit {proc.returncode}, expected {code}\n{proc.stderr}"
        return json.loads(proc.stdout)


def make_workspace(root: Path, demo: Demo, *, bare: bool = False) -> Workspace:
    """The demo profile and model, a private store holding the demo bundle, and the bundle at bundle/.

    ``bare``: none of these, only the environment (an empty store, the shared graph cache), as a
    user has it before the quickstart.
    """
    if not bare:
        shutil.copytree(demo.model_dir, root / "models" / "tiny-llama")
        shutil.copy(demo.profile, root / "tiny-llama-cpu.yaml")
        shutil.copytree(demo.bundle, root / "bundle")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("NEURONC_")},
        "NEURONC_STORE": str(root / "store"),
        "NEURONC_GRAPH_CACHE": str(demo.graph_cache),
        "XDG_CACHE_HOME": str(root / "cache"),
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    for name in ("NEURON_CC_FLAGS", "CUSTOM_CACHE_REPO", "HF_ENDPOINT", "HF_TOKEN"):
        env.pop(name, None)
    ws = Workspace(root, demo, env)
    if not bare:
        proc = ws.run("store", "publish", "bundle")
        assert proc.returncode == 0, proc.stderr
    return ws


@pytest.fixture(scope="module")
def workspace(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    yield make_workspace(tmp_path_factory.mktemp("docs-workspace"), demo)
