"""The real Neuron SDK on a Neuron instance: compile a tiny model with each backend.

Marked ``neuron``: they run only where a Neuron device is present (/dev/neuron0, or a ``neuron``
line in /proc/devices) and the backend's SDK is installed; everywhere else they are skipped with
the reason. None of them has been run yet: no Neuron hardware was available while writing them.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from sdk_doubles.fixtures import make_job, make_spec

from neuronc.backends import get_backend
from neuronc.backends._neuron_common import neuron_device_present

pytestmark = [
    pytest.mark.neuron,
    pytest.mark.skipif(
        not neuron_device_present(), reason="no Neuron device (/dev/neuron0 or 'neuron' in /proc/devices)"
    ),
]

LLM = """
model: {{id: ./model}}
backend: {backend}
target: {target}
tp_degree: 2
batch_size: 1
amp: bf16
sequence: {{max_length: 256{buckets}}}
weights: {weights}
"""


def _target() -> str:
    try:
        name = Path("/sys/devices/virtual/dmi/id/product_name").read_text().strip()
    except OSError:
        return "inf2"
    family = name.split(".")[0]
    return {"trn1n": "trn1"}.get(family, family) if family in {"inf2", "trn1", "trn1n", "trn2"} else "inf2"


def _require(name: str) -> None:
    availability = get_backend(name).availability()
    if not availability.available:
        pytest.skip(f"{name}: {availability.reason}")


@pytest.mark.parametrize(
    ("backend", "buckets", "weights"),
    [
        ("nxdi", ", context_buckets: [128, 256], token_buckets: [256]", "presharded"),
        ("optimum-neuron", "", "presharded"),
        ("transformers-neuronx", ", context_buckets: [128], token_buckets: [256]", "on-load"),
    ],
)
def test_real_sdk_compiles_a_tiny_llama(
    backend: str,
    buckets: str,
    weights: str,
    tiny_llama: Path,
    tmp_path: Path,
) -> None:
    _require(backend)
    shutil.copytree(tiny_llama, tmp_path / "model")
    text = LLM.format(backend=backend, target=_target(), buckets=buckets, weights=weights)
    spec = make_spec(text, tmp_path)
    job = make_job(spec, tmp_path / "model", tmp_path)
    result = get_backend(backend).compile(job)
    assert len(result.graphs) == len(job.plan.graphs)
    assert any(job.artifacts_dir.iterdir())


def test_real_torch_neuronx_traces_a_tiny_bert(tiny_bert: Path, tmp_path: Path) -> None:
    _require("torch-neuronx")
    shutil.copytree(tiny_bert, tmp_path / "model")
    spec = make_spec(
        textwrap.dedent(
            f"""
            model: {{id: ./model, task: feature-extraction}}
            backend: torch-neuronx
            target: {_target()}
            sequence: {{max_length: 64, context_buckets: [32, 64]}}
            """
        ),
        tmp_path,
    )
    job = make_job(spec, tmp_path / "model", tmp_path)
    result = get_backend("torch-neuronx").compile(job)
    assert [g.artifact for g in result.graphs] == ["artifacts/enc-b1-s32.pt", "artifacts/enc-b1-s64.pt"]
