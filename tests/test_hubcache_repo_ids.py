"""An invalid cache repository id is exit 2 naming the value and where it came from (issue 34, item 10).

``--repo`` (cache mirror, cache-lookup), ``CUSTOM_CACHE_REPO`` and optimum-neuron's stored
``$HF_HOME/optimum_neuron_custom_cache`` are checked with huggingface_hub's own rule
(``validate_repo_id``) before anything uses them: before, the library's validation error ended the
run in a traceback (and a repo id also names a directory of neuronc's local cache).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app

SHIPPED_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "tiny-llama-cpu.yaml"
BAD = ["../../etc", "a b", "org/name/extra", "org/na--me", "x" * 97, "", "a\nb"]


def _run(args: list[str], env: dict[str, str]) -> Any:
    out.reset()
    return CliRunner().invoke(app, args, env={"HF_HUB_OFFLINE": "1", **env})


def _error(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("repo", BAD, ids=[repr(r[:12]) for r in BAD])
def test_invalid_repo_ids_are_exit_2_naming_the_value(tmp_path: Path, repo: str) -> None:
    env = {"HF_HOME": str(tmp_path / "hf"), "CUSTOM_CACHE_REPO": ""}
    mirrored = _run(["cache", "mirror", str(tmp_path / "mirror"), "--repo", repo, "--json"], env)
    assert mirrored.exit_code == 2, mirrored.output
    assert _error(mirrored)["message"].startswith("--repo '") and "not a Hugging Face repository id" in mirrored.stdout
    assert not (tmp_path / "mirror").exists()
    looked = _run(["cache-lookup", str(SHIPPED_PROFILE), "--repo", repo, "--json"], env)
    assert looked.exit_code == 2, looked.output
    assert _error(looked)["message"].startswith("--repo '")
    if repo:  # an empty variable is no variable
        from_env = _run(["cache-lookup", str(SHIPPED_PROFILE), "--json"], {**env, "CUSTOM_CACHE_REPO": repo})
        assert from_env.exit_code == 2, from_env.output
        assert _error(from_env)["message"].startswith("CUSTOM_CACHE_REPO '")
    if repo.strip() and "\n" not in repo:  # what optimum-neuron's `custom_cache_repo` command would have stored
        stored = tmp_path / "hf" / "optimum_neuron_custom_cache"
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text(repo)
        from_file = _run(["cache-lookup", str(SHIPPED_PROFILE), "--json"], env)
        assert from_file.exit_code == 2, from_file.output
        assert _error(from_file)["message"].startswith(f"{stored} '")
        stored.unlink()
