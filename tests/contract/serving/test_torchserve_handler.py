"""TorchServe: ``torch-model-archiver`` (PyPI) builds the archive from the emitted files, and TorchServe's
own model loader (``ts.model_loader.TsModelLoader``, PyPI ``torchserve``) imports the emitted handler and
runs its ``initialize()`` against the transformers-neuronx SDK double, which loads the bundle's NEFFs
(``load()`` then ``to_neuron()``; a NEFF that the settings do not match raises, and nothing compiles).

The double lacks the per-family modules (``transformers_neuronx.llama.model`` ...), added here as a
test-local helper with a fixed-output ``sample()`` (here only the loading path is under test); the
double's own ``sample()``, bound to the recorded signatures, is exercised by tests/test_deploy_tnx_handler.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ts.model_loader", reason="torchserve is installed by run_serving_contract.sh")

from _serving import doubles_on_path

from neuronc.bundle import read_manifest
from neuronc.deploy import render, write
from neuronc.deploy.torchserve import TNX_MODULES

PROFILES = ["llama2-13b-tnx-inf2-tp12", "opt-6.7b-tnx-inf2-tp2"]


def _family_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers_neuronx.<family>.model modules holding the double's classes, each with a sample()."""
    import torch
    import transformers_neuronx as tnx

    def sample(self: Any, input_ids: torch.Tensor, sequence_length: int, **_: Any) -> torch.Tensor:
        assert input_ids.shape[0] == self.batch_size, "the compiled batch size is fixed"
        assert self._neffs, "sample() before to_neuron()"
        new = torch.ones(input_ids.shape[0], sequence_length - input_ids.shape[1], dtype=input_ids.dtype)
        return torch.cat([input_ids, new], dim=1)

    for class_name, module_name in TNX_MODULES.items():
        base = getattr(tnx, class_name)
        module = types.ModuleType(module_name)
        # Same class name: the double hashes it into each kernel's HLO, as the real one hashes the graph.
        setattr(module, class_name, type(class_name, (base,), {"sample": sample}))
        monkeypatch.setitem(sys.modules, module_name, module)


@pytest.mark.parametrize("name", PROFILES)
def test_archive_builds_and_the_handler_loads_the_neffs(
    shipped: dict[str, Path], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = shipped[name]
    manifest = read_manifest(bundle)
    out = tmp_path / "ts"
    write(render(bundle, "torchserve"), out)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["sh", str(out / "archive.sh")], check=True, env=env, capture_output=True)
    [model_dir] = [p for p in (out / "model_store").iterdir() if p.is_dir()]
    manifest_json = json.loads((model_dir / "MAR-INF" / "MANIFEST.json").read_text())
    assert manifest_json["model"]["handler"] == "neuronc_tnx_handler.py"
    assert manifest_json["model"]["configFile"] == "model-config.yaml"
    assert (model_dir / "artifacts" / "neff").is_dir() and (model_dir / "model" / "config.json").is_file()

    with doubles_on_path(tmp_path):
        _family_modules(monkeypatch)
        monkeypatch.syspath_prepend(str(model_dir))  # what TorchServe's worker does for the model dir
        monkeypatch.delenv("NEURON_RT_NUM_CORES", raising=False)
        monkeypatch.chdir(tmp_path)
        from ts.model_loader import TsModelLoader

        batch = manifest.profile["batch_size"]
        service = TsModelLoader().load(
            model_dir.name, str(model_dir), handler="neuronc_tnx_handler.py", batch_size=batch
        )
        handler = service._entry_point.__self__
        model = handler.model
        assert model._load_dir == str(model_dir / "artifacts" / "neff")
        assert sorted(model._neffs) == sorted(
            n.removesuffix(".neff") for n in manifest.extra["transformers_neuronx"]["neffs"]
        )
        assert not (tmp_path / "tnx").exists(), "the double compiled (it writes tnx/ in the working directory)"
        recorded = manifest.extra["transformers_neuronx"]["from_pretrained"]
        assert (model.amp, model.tp_degree, model.batch_size) == (
            recorded["amp"],
            recorded["tp_degree"],
            recorded["batch_size"],
        )
        assert model.token_buckets == recorded["n_positions"]
        assert model.context_buckets == recorded["context_length_estimate"]
        assert os.environ["NEURON_RT_NUM_CORES"] == str(recorded["tp_degree"])
        sys.modules.pop("neuronc_tnx_handler", None)

        requests = [
            {"body": json.dumps({"prompt": "t1 t2 t3", "max_tokens": 2}).encode()},
            {"body": {"prompt": "t4"}},
        ][:batch]  # TorchServe sends at most batchSize requests at once
        answers = service._entry_point(requests, service.context)
        assert answers[0]["choices"][0]["finish_reason"] == "length"
        assert answers[0]["usage"]["completion_tokens"] == 2
        assert answers[-1]["object"] == "text_completion"
        longest = max(manifest.profile["sequence"]["context_buckets"])
        too_long = service._entry_point([{"body": {"prompt": " ".join(["t1"] * (longest + 1))}}], service.context)
        assert "at most" in too_long[0]["error"]["message"]


@pytest.mark.parametrize("name", PROFILES)
def test_start_line_and_config_properties_parse_with_torchserves_own_code(
    shipped: dict[str, Path], name: str, tmp_path: Path
) -> None:
    """The start line parses with TorchServe's argument parser; its properties reader finds --port."""
    import shlex

    from ts.arg_parser import ArgParser
    from ts.model_server import load_properties

    from neuronc.deploy import DeployOptions

    out = tmp_path / "ts"
    write(render(shipped[name], "torchserve", DeployOptions(port=9123)), out)
    start = next(li for li in (out / "archive.sh").read_text().splitlines() if li.startswith("echo 'start: "))
    argv = shlex.split(start.removeprefix("echo 'start: ").removesuffix("'"))
    assert argv[0] == "torchserve"
    args = ArgParser.ts_parser().parse_args(argv[1:])
    assert args.start and args.ts_config == "config.properties" and args.model_store == "model_store"
    assert load_properties(str(out / args.ts_config))["inference_address"] == "http://0.0.0.0:9123"
