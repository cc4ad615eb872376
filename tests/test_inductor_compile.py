"""Real AOTInductor compiles of the demo model: backend, graph cache, runtime safety, the whole pipeline.

One session fixture compiles the demo profile's three graphs (CTE 32, CTE 64, TKG 128) once with
``InductorBackend.compile`` into a graph cache that every other test reuses, so the suite compiles
four graphs in all (the fourth when a test changes one bucket) plus one that fails on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc.backends import get_backend
from neuronc.backends.base import CompileJob, CompileResult
from neuronc.cli import app
from neuronc.errors import CompileError, VerificationError
from neuronc.profile import parse_profile

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "profiles" / "models" / "tiny-llama"
PROFILE = REPO / "profiles" / "tiny-llama-cpu.yaml"
PROMPTS = ["The quick brown fox", "Hello, world! This is a tiny model", " ".join(["rain"] * 20)]


def _spec(**replace: str) -> Any:
    text = PROFILE.read_text(encoding="utf-8")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return parse_profile(text, str(PROFILE), base_dir=PROFILE.parent).specs[0]


def _bundle_skeleton(directory: Path, weights: dict[str, Any] | None = None) -> Path:
    """model/ and weights/ as the pipeline lays them out (tp=1: one rank shard, the full state dict)."""
    (directory / "model").mkdir(parents=True)
    (directory / "weights").mkdir()
    for path in DEMO.iterdir():
        if path.suffix != ".safetensors":
            shutil.copyfile(path, directory / "model" / path.name)
    shard = directory / "weights" / "rank-000-of-001.safetensors"
    if weights is None:
        shutil.copyfile(DEMO / "model.safetensors", shard)
    else:
        from safetensors.torch import save_file

        save_file(weights, str(shard))
    return directory


def _compile(bundle: Path, spec: Any, cache: Path | str, jobs: int = 2) -> CompileResult:
    backend = get_backend("inductor")
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=DEMO,
        artifacts_dir=bundle / "artifacts",
        logs_dir=bundle / "logs",
        work_dir=bundle.parent / f"{bundle.name}-work",
        weights_dir=bundle / "weights",
        jobs=jobs,
        env={"NEURONC_GRAPH_CACHE": str(cache)},
    )
    return backend.compile(job)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CompileResult, Path]:
    root = tmp_path_factory.mktemp("inductor")
    cache = root / "graph-cache"
    bundle = _bundle_skeleton(root / "bundle")
    result = _compile(bundle, _spec(), cache)
    return bundle, result, cache


@pytest.fixture(scope="session")
def hf_model() -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(DEMO)).eval()


@pytest.fixture(scope="session")
def runner(compiled: tuple[Path, CompileResult, Path]) -> Any:
    from neuronc.runtime import load

    return load(compiled[0])


def _hf_tokens(model: Any, ids: list[int], new: int) -> list[int]:
    import torch

    input_ids = torch.tensor([ids])
    out = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new, do_sample=False, pad_token_id=2
    )
    return [int(t) for t in out[0, len(ids) :]]


# ------------------------------------------------------------------------------------------------
# Backend
# ------------------------------------------------------------------------------------------------


def test_compile_writes_weightless_packages_logs_and_index(compiled: tuple[Path, CompileResult, Path]) -> None:
    bundle, result, cache = compiled
    assert [g.graph.name for g in result.graphs] == ["cte-b1-s32", "cte-b1-s64", "tkg-b1-s128"]
    assert not any(g.cache_hit for g in result.graphs)
    index = json.loads((bundle / "artifacts" / "inductor.json").read_text())
    assert index["dtype"] == "float32" and index["max_length"] == 128
    assert index["context_buckets"] == [32, 64] and index["token_buckets"] == [128]
    for compiled_graph in result.graphs:
        name = compiled_graph.graph.name
        assert compiled_graph.artifact == f"artifacts/{name}.pt2"
        assert compiled_graph.compile_seconds > 1
        log = (bundle / "logs" / f"{name}.log").read_text()
        assert "[neuronc] done in" in log and "# built in" in log
        meta = json.loads((bundle / "artifacts" / f"{name}.json").read_text())
        assert meta["export_seconds"] > 0 and meta["aoti_seconds"] > 0
        # Every weight is a runtime-bound constant: 2 layers x 9 + embeddings, final norm, lm_head;
        # so is rotary's inv_freq (head_dim 20: 10 values; AOTInductor inlines 1-D constants of at
        # most 8, torch/_inductor/graph.py GraphLowering.can_inline_constant), shipped by the graph.
        assert len(meta["constants"]) == 22
        owned = [fqn for fqn, info in meta["constants"].items() if info["graph_owned"]]
        assert owned == ["model.model.rotary_emb.inv_freq"]
        with zipfile.ZipFile(bundle / "artifacts" / f"{name}.pt2") as package:
            names = package.namelist()
        assert any(n.endswith(".so") for n in names)
        assert not any("weight" in n or n.endswith((".bin", ".pt")) for n in names), names
    assert (cache / "torchinductor").is_dir()


def test_weights_that_do_not_cover_the_graphs_fail_the_compile(
    tmp_path: Path, compiled: tuple[Path, CompileResult, Path]
) -> None:
    from safetensors.torch import load_file

    weights = load_file(str(DEMO / "model.safetensors"))
    del weights["model.norm.weight"]
    bundle = _bundle_skeleton(tmp_path / "bundle", weights)
    with pytest.raises(CompileError) as info:
        _compile(bundle, _spec(), compiled[2])  # every graph is a cache hit: this costs nothing
    assert "do not cover" in info.value.message
    assert any("model.model.norm.weight: no weight named model.norm.weight" in d for d in info.value.details)


@pytest.mark.parametrize("jobs", [1, 3], ids=["in-process", "forked"])
def test_a_failing_graph_compile_is_a_compile_error_with_its_log(tmp_path: Path, jobs: int) -> None:
    # A real setting whose value makes the C++ step fail (an unknown name is refused at validate time).
    # With one job the worker compiles in its own process; with three, in a forked child per graph,
    # and the first failure stops the others.
    broken = "weights: presharded\noptions:\n  inductor_config: {cpp.cxx: [null, neuronc-no-such-compiler]}"
    spec = _spec(**{"weights: presharded": broken})
    bundle = _bundle_skeleton(tmp_path / "bundle")
    with pytest.raises(CompileError) as info:
        _compile(bundle, spec, tmp_path / "graph-cache", jobs=jobs)
    assert not list((tmp_path / "graph-cache").glob("*/*.pt2"))  # nothing half-built was published
    logs = sorted(p.name for p in (bundle / "logs").iterdir())
    assert len(logs) == 1 and logs[0].removesuffix(".log") in info.value.message  # the failed graph's log
    error = info.value
    assert error.exit_code == 3
    assert error.log_path is not None and Path(error.log_path).is_file()
    assert "neuronc-no-such-compiler" in "\n".join(error.details) + Path(error.log_path).read_text()
    assert "[neuronc] FAILED" in Path(error.log_path).read_text()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; the worker forks on Linux only")
def test_ctrl_c_stops_the_worker_its_forked_children_and_their_compilers(tmp_path: Path) -> None:
    # The worker leads a process group of its own: a terminal's Ctrl-C reaches neuronc only, which
    # kills the whole group (worker, the children compiling graphs, their g++), then exits 130.
    env = {**os.environ, "NEURONC_STORE": str(tmp_path / "store"), "NEURONC_GRAPH_CACHE": str(tmp_path / "graphs")}
    command = [sys.executable, "-m", "neuronc", "compile", str(PROFILE), "--jobs", "2"]
    proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    forked: list[int] = []
    while time.monotonic() < deadline and len(forked) < 2:
        workers = [p for p in _children(proc.pid) if "inductor.worker" in Path(f"/proc/{p}/cmdline").read_text()]
        forked = [c for w in workers for c in _children(w)]
        time.sleep(0.1)
    assert len(workers) == 1 and len(forked) >= 2, (workers, forked)
    assert os.getpgid(workers[0]) == workers[0] != os.getpgid(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in [*workers, *forked]):
        time.sleep(0.1)
    assert not any(_alive(p) for p in [*workers, *forked])
    assert not list((tmp_path / "graphs").glob("*/*.pt2"))


# ------------------------------------------------------------------------------------------------
# Runtime
# ------------------------------------------------------------------------------------------------


def test_tokens_equal_hf_greedy_generate(runner: Any, hf_model: Any) -> None:
    buckets = set()
    for prompt in PROMPTS:
        ids = runner.encode(prompt)
        result = runner.generate(ids, max_new_tokens=24)
        buckets.add(result.context_bucket)
        assert result.tokens == _hf_tokens(hf_model, ids, 24), prompt
        assert result.ttft_ms > 0 and result.ms_per_token is not None
    assert buckets == {32, 64}
    # A prompt that fills the cache up to max_length, with the right stop reason.
    ids = list(range(3, 60))
    result = runner.generate(ids, max_new_tokens=500, stop_at_eos=False)
    assert result.stop_reason == "max_length" and len(result.tokens) == 128 - len(ids)


def test_graphs_share_one_copy_of_the_weights(compiled: tuple[Path, CompileResult, Path]) -> None:
    import torch

    from neuronc.runtime import load

    runner = load(compiled[0])  # a private runner: its weights are edited below
    lm_head = runner._constants["lm_head.weight"]
    lm_head.zero_()  # in place: every graph sees it, so every graph's logits become 0
    logits, _ = runner.prefill([[1, 5, 9]])
    assert torch.count_nonzero(logits) == 0
    assert torch.count_nonzero(runner.step([4], [3])) == 0


def test_wrong_shapes_and_dtypes_are_errors_not_crashes(compiled: tuple[Path, CompileResult, Path]) -> None:
    # Straight into the AOTInductor model, past neuronc's own checks: AOTI_RUNTIME_CHECK_INPUTS=1
    # must turn what would abort the process into Python exceptions. In a child, in case it does not.
    code = textwrap.dedent(
        f"""
        import torch
        from neuronc.runtime import load
        runner = load({str(compiled[0])!r})
        graph = runner.context_graph_for(10)
        tail = (torch.arange(32)[None], torch.tensor([3]), *runner.kv)
        for bad in (torch.zeros((1, 33), dtype=torch.int64), torch.zeros((1, 32), dtype=torch.int32)):
            try:
                graph.model(bad, *tail)
            except RuntimeError as exc:
                print("RAISED", str(exc).splitlines()[0])
            else:
                print("NO ERROR")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("RAISED", "NO ERROR"))]
    assert len(lines) == 2 and all(line.startswith("RAISED") for line in lines), proc.stdout
    assert "expected: 32, but got: 33" in lines[0]
    assert "unmatched dtype" in lines[1]


def test_a_missing_constant_is_refused_before_the_first_call(
    tmp_path: Path, compiled: tuple[Path, CompileResult, Path]
) -> None:
    from safetensors.torch import load_file

    from neuronc.runtime import load

    weights = load_file(str(DEMO / "model.safetensors"))
    del weights["model.layers.1.mlp.up_proj.weight"]
    bundle = _bundle_skeleton(tmp_path / "bundle", weights)
    shutil.copytree(compiled[0] / "artifacts", bundle / "artifacts")
    with pytest.raises(VerificationError) as info:
        load(bundle)
    assert "cannot be bound" in info.value.message
    assert any("model.model.layers.1.mlp.up_proj.weight: not in the bundle's weights" in d for d in info.value.details)


def test_accuracy_passes_and_a_perturbed_bundle_diverges(compiled: tuple[Path, CompileResult, Path]) -> None:
    from neuronc.accuracy import AccuracyError, accuracy_check, verify_accuracy
    from neuronc.runtime import load

    bundle = compiled[0]
    report = accuracy_check(None, None, 8)(bundle, None)
    assert report["passed"] and report["max_abs_diff"] < 1e-5
    assert all(p["tokens_match"] for p in report["prompts"])

    runner = load(bundle)
    runner._constants["lm_head.weight"].mul_(1.05)  # the bundle now disagrees with its own weights file
    perturbed = verify_accuracy(bundle, ["The quick brown fox"], max_new_tokens=8, runner=runner)
    assert not perturbed.passed
    divergence = perturbed.prompts[0].first_divergence
    assert divergence is not None and divergence.step == 0
    with pytest.raises(AccuracyError) as info:
        perturbed.raise_for_failure()
    assert info.value.exit_code == 4
    assert "first divergence at step 0" in info.value.details[0]
    assert info.value.to_json()["accuracy"]["passed"] is False


# ------------------------------------------------------------------------------------------------
# The whole pipeline through the CLI (graphs come from the session's graph cache)
# ------------------------------------------------------------------------------------------------


def test_pipeline_compile_verify_run_accuracy_hit_and_one_bucket_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: tuple[Path, CompileResult, Path], hf_model: Any
) -> None:
    monkeypatch.setenv("NEURONC_GRAPH_CACHE", str(compiled[2]))
    cli = CliRunner()
    profile = tmp_path / "tiny.yaml"
    profile.write_text(PROFILE.read_text().replace("id: models/tiny-llama", f"id: {DEMO}"))

    first = cli.invoke(app, ["compile", str(profile), "--json"])
    assert first.exit_code == 0, first.output
    build = json.loads(first.stdout)["builds"][0]
    assert build["status"] == "built"
    assert [g["cache_hit"] for g in build["graphs"]] == [True, True, True]
    bundle = build["bundle"]

    verify = cli.invoke(app, ["verify", bundle, "--json"])
    assert verify.exit_code == 0, verify.stdout + verify.stderr

    ran = cli.invoke(app, ["run", bundle, "--prompt", PROMPTS[0], "--max-new-tokens", "20", "--json"])
    assert ran.exit_code == 0, ran.output
    data = json.loads(ran.stdout)
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(DEMO))(PROMPTS[0])["input_ids"]
    assert data["tokens"] == _hf_tokens(hf_model, ids, 20)
    assert data["context_bucket"] == 32 and data["ttft_ms"] > 0 and data["ms_per_token"] > 0

    human = cli.invoke(app, ["run", bundle, "--prompt", PROMPTS[0], "-n", "5"])
    assert human.exit_code == 0 and human.stdout.strip(), human.output

    too_long = cli.invoke(app, ["run", bundle, "--prompt", " ".join(["word"] * 200)])
    assert too_long.exit_code == 2
    assert "largest context bucket of this bundle is 64" in too_long.output

    from neuronc.accuracy import verify_accuracy

    assert verify_accuracy(bundle, max_new_tokens=8).passed

    again = cli.invoke(app, ["compile", str(profile), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["builds"][0]["status"] == "hit"

    profile.write_text(profile.read_text().replace("context_buckets: [32, 64]", "context_buckets: [32, 48]"))
    changed = cli.invoke(app, ["compile", str(profile), "--json"])
    assert changed.exit_code == 0, changed.output
    graphs = {g["name"]: g["cache_hit"] for g in json.loads(changed.stdout)["builds"][0]["graphs"]}
    assert graphs == {"cte-b1-s32": True, "cte-b1-s48": False, "tkg-b1-s128": True}


def test_the_output_neutral_settings_leave_the_logits_bit_identical(
    tmp_path: Path, compiled: tuple[Path, CompileResult, Path], runner: Any
) -> None:
    # neuronc compiles with graphs.OUTPUT_NEUTRAL_SETTINGS (a faster C++ compile); the same graphs
    # built with torch's own values for them compute exactly the same logits, prefill and decode.
    import torch

    from neuronc.backends.inductor.graphs import OUTPUT_NEUTRAL_SETTINGS
    from neuronc.runtime import load

    torch_values = {
        "aot_inductor.compile_wrapper_opt_level": "O1",
        "aot_inductor.enable_line_tables": True,
        "aot_inductor.enable_frame_pointer": True,
    }
    assert set(torch_values) < set(OUTPUT_NEUTRAL_SETTINGS)
    options = json.dumps({"inductor_config": torch_values})
    spec = _spec(**{"context_buckets: [32, 64]": "context_buckets: [32]", "weights: presharded": f"weights: presharded\noptions: {options}"})  # fmt: skip
    bundle = _bundle_skeleton(tmp_path / "bundle")
    # One job: the worker compiles in its own process, where the fixture's graphs came from forked
    # children; the comparison covers that too.
    result = _compile(bundle, spec, compiled[2], jobs=1)
    assert [g.graph.name for g in result.graphs] == ["cte-b1-s32", "tkg-b1-s128"]
    assert not any(g.cache_hit for g in result.graphs)  # the settings are in the graph cache key
    plain = load(bundle)
    generator = torch.Generator().manual_seed(0)
    for length in (1, 7, 32):
        ids = torch.randint(3, 1024, (length,), generator=generator).tolist()
        ours, _ = runner.prefill([ids])
        theirs, _ = plain.prefill([ids])
        assert torch.equal(ours, theirs)
        for position in range(length, length + 12):
            token = int(ours.argmax())
            ours, theirs = runner.step([token], [position]), plain.step([token], [position])
            assert torch.equal(ours, theirs)
