"""vllm-neuron bundles for the serving contract: one per vLLM line the plugin's images pin, compiled by
``neuronc compile`` in the release's "DLC image" as the stand-in docker runs it
(tests/sdk_doubles/container_runtime.py)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# One vllm-neuron release per vLLM line its images pin.
VLLM_NEURON_RELEASES = ("2.31.0", "2.32.0", "2.33.0")


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def compile_vllm_neuron(workdir: Path) -> dict[str, Path]:
    """One vllm-neuron bundle per release of VLLM_NEURON_RELEASES, compiled (``neuronc compile``) in the
    release's DLC image as the stand-in docker runs it. Keys: ``vllm-neuron-<release>``."""
    from _serving import write_wide_llama
    from click.testing import CliRunner
    from sdk_doubles.fixtures import FakeRuntime

    from neuronc._output import out
    from neuronc.cli import app

    model = workdir / "wide-llama" if (workdir / "wide-llama").is_dir() else write_wide_llama(workdir / "wide-llama")
    runtime = workdir / "fake-runtime"
    (runtime / "bin").mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve().parents[2] / "sdk_doubles" / "container_runtime.py"
    docker = runtime / "bin" / "docker"
    docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n', encoding="utf-8")
    docker.chmod(0o755)
    state = runtime / "state.json"
    state.write_text(json.dumps({"images": {}, "registry": {}, "calls": []}), encoding="utf-8")
    FakeRuntime(state, runtime / "bin").add_release_images()
    path = os.pathsep.join([str(runtime / "bin"), os.environ.get("PATH", "")])
    bundles: dict[str, Path] = {}
    env = {"PATH": path, "NEURONC_FAKE_RUNTIME_STATE": str(state), "NEURONC_VLLM_NEURON_RUNNER": "docker"}
    with _environ(**env):
        for release in VLLM_NEURON_RELEASES:
            folder = workdir / f"vllm-neuron-{release}"
            folder.mkdir(parents=True)
            profile = folder / "profile.yaml"
            profile.write_text(
                f"model: {{id: {json.dumps(str(model))}}}\nbackend: vllm-neuron\ntarget: trn2\nsdk: '{release}'\n"
                "tp_degree: 4\nbatch_size: 4\n"
                "sequence: {max_length: 1024, context_buckets: [256, 512], token_buckets: [512, 1024]}\n"
            )
            out.reset()
            result = CliRunner().invoke(app, ["compile", str(profile), "--json", "--store", str(workdir / "store")])
            assert result.exit_code == 0, result.output
            bundles[f"vllm-neuron-{release}"] = Path(json.loads(result.stdout)["builds"][0]["bundle"])
    return bundles
