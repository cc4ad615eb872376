"""Rebind: a fine-tune of a compiled architecture takes its graphs from the store and stages only its
weights; the text it generates is exactly what a full compile of it gives; the base bundle is unchanged;
a retrain in place is a new bundle, never the old one."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _demo import Demo
from _finetune import demo_copy, perturb_checkpoint
from click.testing import CliRunner

from neuronc.bundle import read_manifest
from neuronc.cli import app
from neuronc.pipeline import compile_profiles

PROMPT = "The quick brown fox"


def _neuronc(*args: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc", *args, "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _tree_digest(bundle: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
        digest.update(path.relative_to(bundle).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.mark.slow  # torch loaded in fresh processes to run the bundles
def test_a_fine_tune_is_rebound_and_runs_as_a_full_compile_of_it(demo: Demo, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(demo.store, store)
    base = store / Path(demo.bundle).relative_to(demo.store)
    base_before = _tree_digest(base)
    ft_profile = demo_copy(tmp_path / "ft", seed=1)
    # No graph cache: whatever is reused comes from the store.
    env = {**demo.env(), "NEURONC_STORE": str(store), "NEURONC_GRAPH_CACHE": "off"}

    data = _neuronc("compile", str(ft_profile), env=env)
    [report] = data["builds"]
    assert report["status"] == "rebound" and data["summary"]["rebound"] == 1
    assert report["rebound_from"]["config_hash"] == demo.report.config_hash
    assert report["config_hash"] != demo.report.config_hash
    assert "compile" not in report["stage_seconds"]  # no compiler ran
    rebound = Path(report["bundle"])
    manifest = read_manifest(rebound)
    assert manifest.extra["rebound"]["config_hash"] == demo.report.config_hash
    assert manifest.extra["keys"]["graphs"] == report["graphs_key"]
    assert [s.sha256 for s in manifest.shards] != [s.sha256 for s in read_manifest(base).shards]
    assert _tree_digest(base) == base_before  # the base bundle is unchanged

    # A full compile of the fine-tune (graphs from the demo's graph cache: they hold no weights).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURONC_GRAPH_CACHE", str(demo.graph_cache))
        [full] = compile_profiles([ft_profile], store=tmp_path / "full", jobs=2)
    assert full.status == "built" and full.config_hash == report["config_hash"]
    ran_rebound = _neuronc("run", str(rebound), "--prompt", PROMPT, "-n", "24", env=env)
    ran_full = _neuronc("run", str(full.bundle), "--prompt", PROMPT, "-n", "24", env=env)
    ran_base = _neuronc("run", str(base), "--prompt", PROMPT, "-n", "24", env=env)
    assert ran_rebound["text"] == ran_full["text"] and ran_rebound["tokens"] == ran_full["tokens"]
    assert ran_rebound["tokens"] != ran_base["tokens"]  # the new weights are the ones bound

    verified = _neuronc("verify", str(rebound), "--accuracy", env=env)
    assert verified["ok"] is True and verified["accuracy"]["passed"] is True

    # Retrained in place: a new bundle (rebound again), never the first fine-tune's.
    perturb_checkpoint(ft_profile.parent / "models" / "tiny-llama", seed=2)
    [again] = _neuronc("compile", str(ft_profile), env=env)["builds"]
    assert again["status"] == "rebound"
    assert again["config_hash"] not in (report["config_hash"], demo.report.config_hash)
    assert again["bundle"] != report["bundle"]
    assert _tree_digest(base) == base_before


def test_no_rebind_from_a_bundle_whose_graphs_may_hold_weights(demo: Demo, tmp_path: Path) -> None:
    """A stored bundle that records no scheme-2 keys (an older neuronc's) is never a graphs source."""
    from neuronc.pipeline.context import resolve_build
    from neuronc.pipeline.rebind import graphs_source
    from neuronc.profile import load_profile
    from neuronc.store import open_store

    ft_profile = demo_copy(tmp_path / "ft", seed=3)
    ctx = resolve_build(load_profile(ft_profile).builds[0])
    store = open_store(demo.store)
    assert graphs_source(store, ctx) is not None
    # `plan` shows the rebind as its own status, with the bundle the graphs come from and the expected time.
    result = CliRunner().invoke(app, ["plan", str(ft_profile), "--store", str(demo.store), "--json"])
    assert result.exit_code == 0, result.output
    [planned] = json.loads(result.stdout)["builds"]
    assert planned["store"]["status"] == "rebind"
    assert planned["store"]["graphs_from"]["config_hash"] == demo.report.config_hash
    assert 0 < planned["store"]["expected_seconds"] < demo.report.wall_seconds
    assert {g["store"] for g in planned["graphs"]} == {"rebind"}
    # The same graphs key, but the backend's graphs declared as holding the weights: no source.
    from dataclasses import replace

    from neuronc.keys import config_key, spec_model_dir

    spec = ctx.spec
    embedded = config_key(
        spec,
        flags_mode=ctx.backend.toolchain.compiler_flags_mode,
        model_dir=spec_model_dir(spec),
        revision=None,
        embeds_weights=True,
    )
    assert graphs_source(store, replace(ctx, config_key=embedded)) is None
