"""`neuronc compile --executor ray` on a real local Ray cluster (several raylets of different sizes on
this machine, Ray's own test utility) publishing into a real S3 store (SeaweedFS). No mocks of Ray:
the drivers are `neuronc` processes, the builds Ray tasks on the nodes.

One cluster for the module (starting it takes 15-30 s on two cores): a head without CPUs, a small and
a large node. The tests that kill or add nodes add their own and remove them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _farm import GIB, Farm, start_farm, wait_for
from _pipeline import fake_hub_cache, write_profile, write_tiny_llama
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from plugins.fake_backend import VERSION_ENV

pytestmark = [pytest.mark.ray, pytest.mark.s3]

ray = pytest.importorskip("ray", reason="the farm tests need Ray (pip install 'neuronc[ray]')")

SHIPPED_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "tiny-llama-cpu.yaml"
AWS_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


@pytest.fixture(scope="module")
def bucket(s3_server: SeaweedFS) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        yield use_server_and_make_bucket(s3_server, mp)


@pytest.fixture(scope="module")
def farm(bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    started = time.monotonic()
    env = {var: os.environ[var] for var in AWS_VARS if var in os.environ}
    farm = start_farm(tmp_path_factory.mktemp("farm"), env)
    try:
        farm.add_node("small", memory=int(2.5 * GIB))
        farm.add_node("large", memory=4 * GIB)
        farm.cluster.wait_for_nodes()
        print(f"\nRay test cluster up in {time.monotonic() - started:.1f}s")
        yield farm
    finally:
        farm.cluster.shutdown()


@pytest.fixture
def store(bucket: str) -> str:
    """A fresh prefix of the module's bucket: each test its own store."""
    return f"s3://{bucket}/{secrets.token_hex(4)}/bundles"


def bundles_in(store: str, tmp_path: Path) -> list[Any]:
    from neuronc.store import RemoteStore

    return RemoteStore(store, cache_dir=tmp_path / f"probe-{secrets.token_hex(3)}").list()


def shipped_matrix(directory: Path) -> Path:
    """The shipped CPU profile (the demo model) as a 3-build matrix of context buckets."""
    data = yaml.safe_load(SHIPPED_PROFILE.read_text())
    data["model"]["id"] = str((SHIPPED_PROFILE.parent / data["model"]["id"]).resolve())
    data["matrix"] = {"sequence.context_buckets": [[32], [64], [32, 64]]}
    path = directory / "tiny-llama-cpu-matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def document(result: Any, schema: str | None = None) -> dict[str, Any]:
    """The one JSON document on stdout, checked against docs/schemas/<schema>.schema.json."""
    assert result.stdout.strip(), result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    if schema is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "docs"))
        from _schemas import assert_conforms

        assert_conforms(schema, data)
    return data


# -- the shipped CPU profile as a 3-build matrix, across the nodes ---------------------------------


@pytest.mark.slow
def test_a_matrix_of_the_shipped_profile_compiles_across_nodes_into_s3(farm: Farm, store: str, tmp_path: Path) -> None:
    profile = shipped_matrix(tmp_path)
    report_file = tmp_path / "report.json"
    args = ["compile", str(profile), "--executor", "ray", "--store", store, "--json", "--report", str(report_file)]
    result = farm.neuronc(*args, "--out", str(tmp_path / "out"))
    data = document(result, "compile-report")
    assert result.returncode == 0, result.stderr
    assert data == json.loads(report_file.read_text())
    builds = data["builds"]
    assert [b["status"] for b in builds] == ["built"] * 3
    # Each build names the node it ran on; the three ran on both nodes (each node has one CPU).
    nodes = {m for b in builds for m in b["messages"] if m.startswith("ran on Ray node")}
    assert len(nodes) == 2, builds
    # The report names the bundles as the store does, and --out holds a verified copy of each.
    assert all(b["bundle"].startswith(f"{store}/") for b in builds)
    assert len(bundles_in(store, tmp_path)) == 3
    from neuronc.bundle import verify_bundle

    assert all(verify_bundle(b["out"]).ok for b in builds)
    # The driver's log (stderr, not a TTY) says where each build is.
    assert "queued on the Ray cluster (needs 2.0 GiB, 1 CPU)" in result.stderr
    assert "running on Ray node" in result.stderr

    # Again: every build is a hit, found by a node, nothing compiled.
    again = document(farm.neuronc("compile", str(profile), "--executor", "ray", "--store", store, "--json"))
    assert [b["status"] for b in again["builds"]] == ["hit"] * 3
    assert [b["config_hash"] for b in again["builds"]] == [b["config_hash"] for b in builds]


# -- refused before anything is submitted --------------------------------------------------------


def test_a_build_larger_than_every_node_is_refused_before_submitting(farm: Farm, store: str, tmp_path: Path) -> None:
    # The demo model's shape, scaled up in config.json only: the pre-flight is arithmetic on it.
    big = tmp_path / "big-model"
    big.mkdir()
    config = json.loads((SHIPPED_PROFILE.parent / "models" / "tiny-llama" / "config.json").read_text())
    config.update(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, vocab_size=32000)
    (big / "config.json").write_text(json.dumps(config))
    data = yaml.safe_load(SHIPPED_PROFILE.read_text())
    data["model"]["id"] = str(big)
    data["name"] = "big"
    profile = tmp_path / "big.yaml"
    profile.write_text(yaml.safe_dump(data))
    small = shipped_matrix(tmp_path)

    result = farm.neuronc("compile", str(small), str(profile), "--executor", "ray", "--store", store, "--json")
    assert result.returncode == 5, result.stderr
    error = document(result, "compile-report")["error"]
    assert error["message"] == "1 build fit no node of the Ray cluster (2 nodes with CPUs)"
    [need, largest] = error["details"]
    assert need.startswith(f"{profile}: needs ") and "GiB, 1 CPU" in need
    assert largest.startswith("largest node: ") and "with 4.0 GiB, 1 CPU" in largest
    assert document(result)["builds"] == []  # nothing was submitted, not even the builds that fit
    assert bundles_in(store, tmp_path) == []

    # `plan --executor ray` shows where each build would fit, and which fits nowhere.
    plan = farm.neuronc("plan", str(small), str(profile), "--executor", "ray", "--json")
    assert plan.returncode == 5, plan.stderr
    rows = document(plan, "plan")["builds"]
    assert [len(r["ray"]["nodes"]) for r in rows] == [2, 2, 2, 0]
    assert rows[0]["ray"]["need"]["cpus"] == 1 and rows[3]["ray"]["fits"] is False


def test_a_node_local_store_is_refused(farm: Farm, tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    local = tmp_path / "store"
    result = farm.neuronc("compile", str(profile), "--executor", "ray", "--store", str(local), "--json")
    assert result.returncode == 2, result.stderr
    message = document(result)["error"]["message"]
    assert message == f"the store {local} is a directory on this machine: the nodes of a Ray cluster do not see it"
    # The default store (the user cache) is a local directory too.
    assert farm.neuronc("compile", str(profile), "--executor", "ray").returncode == 2
    # Declared shared (every node mounts it: here they share this machine's file system), the probe
    # each node reads proves it, and the build runs.
    shared = farm.neuronc("compile", str(profile), "--executor", "ray", "--store", str(local), "--ray-shared-store")
    assert shared.returncode == 0, shared.stderr
    assert not list((local / ".neuronc" / "markers").iterdir())  # the probe is gone


def test_no_cluster_address_is_an_input_error(farm: Farm, tmp_path: Path) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "p.yaml")
    result = farm.neuronc("compile", str(profile), "--executor", "ray", "--json", env={"RAY_ADDRESS": ""})
    assert result.returncode == 2
    assert "--executor ray needs a cluster" in document(result)["error"]["message"]


# -- faults ---------------------------------------------------------------------------------------


def test_a_node_removed_mid_build_is_retried_on_another(farm: Farm, store: str, tmp_path: Path) -> None:
    # Two fresh nodes that alone have the resource the build asks for: it runs on one, that node is
    # killed mid-build, Ray retries it on the other.
    for name in ("doomed-a", "doomed-b"):
        farm.add_node(name, memory=2 * GIB, farm_kill=1)
    farm.cluster.wait_for_nodes()
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "slow.yaml", options={"sleep": 4})
    log = tmp_path / "driver.json"
    args = ["compile", str(profile), "--executor", "ray", "--store", store, "--json", "--ray-resources", "farm_kill=1"]
    driver = farm.spawn(*args, log=log)
    try:
        first = wait_for(lambda: [c for c in farm.compiles() if c[1].startswith("doomed")], 120, "the build to start")
        victim = first[0][1]
        farm.remove_node(victim)
        driver.wait(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
        for name in ("doomed-a", "doomed-b"):
            if name in farm.nodes:
                farm.remove_node(name)
    err = log.with_suffix(".err").read_text()
    assert driver.returncode == 0, err
    [build] = json.loads(log.read_text())["builds"]
    assert build["status"] == "built"
    assert [c[1] for c in farm.compiles() if c[1].startswith("doomed")] == [victim, other(victim)]
    assert any(m.startswith("retried after losing the attempt on Ray node") for m in build["messages"]), (build, err)
    # The live "was lost …; retrying on" line comes from best-effort progress events (a loaded
    # machine may deliver the second attempt's result first); the report's line is always printed.
    assert "retried after losing the attempt on Ray node" in err
    [entry] = bundles_in(store, tmp_path)  # one bundle for the key
    assert entry.manifest.config_hash == build["config_hash"]


def other(name: str) -> str:
    return {"doomed-a": "doomed-b", "doomed-b": "doomed-a"}[name]


def test_two_drivers_racing_one_matrix_publish_one_bundle_per_key(farm: Farm, store: str, tmp_path: Path) -> None:
    # Four one-CPU nodes for two drivers of two builds each: both drivers' builds of a key can run
    # at once on different nodes, and the S3 store's conditional publish decides.
    for name in ("race-a", "race-b"):
        farm.add_node(name, memory=2 * GIB)
    farm.cluster.wait_for_nodes()
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "race.yaml", options={"sleep": 3}, matrix={"batch_size": [1, 2]})
    args = ["compile", str(profile), "--executor", "ray", "--store", store, "--json"]
    drivers = [farm.spawn(*args, log=tmp_path / f"driver{i}.json") for i in range(2)]
    try:
        for driver in drivers:
            driver.wait(timeout=300)
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
        for name in ("race-a", "race-b"):
            farm.remove_node(name)
    documents = [json.loads((tmp_path / f"driver{i}.json").read_text()) for i in range(2)]
    assert [d["exit_code"] for d in documents] == [0, 0], [(tmp_path / f"driver{i}.err").read_text() for i in range(2)]
    for index in range(2):
        pair = [d["builds"][index] for d in documents]
        assert pair[0]["config_hash"] == pair[1]["config_hash"]
        assert {b["status"] for b in pair} <= {"built", "hit"} and "built" in {b["status"] for b in pair}
        for build in pair:
            if build["status"] == "hit" and len([m for m in build["messages"] if "another publisher" in m]) == 1:
                print(f"build {index}: both drivers compiled it; the store kept the first publish")
    entries = bundles_in(store, tmp_path)
    assert sorted(e.manifest.config_hash for e in entries) == sorted(b["config_hash"] for b in documents[0]["builds"])


def test_ctrl_c_on_the_driver_cancels_the_builds_and_leaves_nothing_in_the_store(
    farm: Farm, store: str, tmp_path: Path
) -> None:
    write_tiny_llama(tmp_path / "model")
    profile = write_profile(tmp_path / "long.yaml", options={"sleep": 60}, matrix={"batch_size": [1, 2]})
    log = tmp_path / "driver.json"
    driver = farm.spawn("compile", str(profile), "--executor", "ray", "--store", store, "--json", log=log)
    try:
        wait_for(lambda: "running on Ray node" in log.with_suffix(".err").read_text(), 120, "a build to start")
        started = time.monotonic()
        driver.send_signal(signal.SIGINT)
        driver.wait(timeout=120)
        stopped = time.monotonic() - started
    finally:
        if driver.poll() is None:
            driver.kill()
    err = log.with_suffix(".err").read_text()
    assert driver.returncode == 130, err
    data = json.loads(log.read_text())
    assert data["interrupted"] is True and data["exit_code"] == 130
    assert "interrupted: cancelling 2 build(s) on the Ray cluster" in err
    assert stopped < 25  # cancelled at once: not waited for (3 minutes), nor killed after the 30 s grace
    assert bundles_in(store, tmp_path) == []
    # The cancelled tasks gave their CPUs back: a build needing a whole node runs now.
    quick = write_profile(tmp_path / "quick.yaml")
    after = farm.neuronc("compile", str(quick), "--executor", "ray", "--store", store, "--json", timeout=180)
    assert after.returncode == 0, after.stderr
    # No node kept the staging directory of a cancelled build.
    # (filelock leaves its empty lock files by design; they are not staging.)
    staging = [
        p
        for node in ("small", "large")
        for p in (farm.root / "nodes" / node).rglob(".staging/*")
        if p.suffix != ".lock"
    ]
    assert staging == []


def test_a_node_without_the_backends_sdk_fails_that_build_with_exit_5_naming_the_node(
    farm: Farm, store: str, tmp_path: Path
) -> None:
    write_tiny_llama(tmp_path / "model")
    good = write_profile(tmp_path / "good.yaml")
    missing = write_profile(tmp_path / "missing.yaml", backend="missing")
    result = farm.neuronc("compile", str(good), str(missing), "--executor", "ray", "--store", store, "--json")
    assert result.returncode == 5, result.stderr
    built, failed = document(result, "compile-report")["builds"]
    assert built["status"] == "built"  # not the whole run
    assert (failed["status"], failed["exit_code"]) == ("failed", 5)
    assert failed["error"]["error"] == "backend_unavailable"
    assert "cannot compile on this machine" in failed["error"]["message"]
    assert "(on Ray node " in failed["error"]["message"]
    assert failed["error"]["hint"] == "pip install neuronc-test-sdk-that-does-not-exist"


# -- the driver's resolution travels with the task ------------------------------------------------


def test_a_moved_main_never_makes_a_node_publish_an_unselected_key(farm: Farm, store: str, tmp_path: Path) -> None:
    """An unpinned Hub model whose `main` moves between `matrix` and the compile: the nodes build the
    commit the key names (the driver's resolution), never the one their own refs say now."""
    repo = f"acme/moved-{secrets.token_hex(3)}"
    first, moved = "a1" * 20, "b2" * 20
    source = write_tiny_llama(tmp_path / "src")
    driver_hf = tmp_path / "driver-hf"
    fake_hub_cache(driver_hf, repo, first, source)
    for name in list(farm.nodes):  # every node has both commits, and its refs/main has moved already
        for commit in (first, moved):
            fake_hub_cache(farm.root / "nodes" / name / "hf", repo, commit, source)
    driver = {"HF_HOME": str(driver_hf)}
    profile = write_profile(tmp_path / "hub.yaml", model=repo)
    [entry] = document(farm.neuronc("matrix", str(profile), "--format", "json", env=driver), "matrix")["include"]
    assert entry["revision"] == first

    # The driver resolves main (first); the nodes, whose main is `moved`, build the driver's commit.
    args = ["compile", str(profile), "--executor", "ray", "--json"]
    result = farm.neuronc(*args, "--store", store, env=driver)
    assert result.returncode == 0, result.stderr
    [build] = document(result, "compile-report")["builds"]
    assert (build["status"], build["config_hash"]) == ("built", entry["config_hash"])
    [published] = bundles_in(store, tmp_path)
    assert published.manifest.config_hash == entry["config_hash"]
    assert published.manifest.hashed_inputs["weights"] == {"hub_id": repo, "revision": first}

    # Now the driver's main moved too: the matrix's key and revision still build exactly that key.
    fake_hub_cache(driver_hf, repo, moved, source)
    other = store.replace("/bundles", "/bundles-after-move")
    lost = farm.neuronc(*args, "--store", other, "--only", entry["key"], env=driver)
    assert lost.returncode == 2, lost.stderr
    assert f"{repo}@main moved from {first} to {moved}" in document(lost)["error"]["message"]
    again = farm.neuronc(*args, "--store", other, "--only", entry["key"], "--revision", first, env=driver)
    assert again.returncode == 0, again.stderr
    assert [(b["status"], b["config_hash"]) for b in document(again)["builds"]] == [("built", entry["config_hash"])]
    assert [e.manifest.config_hash for e in bundles_in(other, tmp_path)] == [entry["config_hash"]]


def test_a_node_whose_toolchain_gives_another_key_fails_that_build_with_exit_5(
    farm: Farm, store: str, tmp_path: Path
) -> None:
    farm.add_node("other-sdk", memory=2 * GIB, env={VERSION_ENV: "9.9.9"}, other_sdk=1)
    farm.cluster.wait_for_nodes()
    try:
        write_tiny_llama(tmp_path / "model")
        profile = write_profile(tmp_path / "p.yaml")
        args = ["compile", str(profile), "--executor", "ray", "--store", store, "--ray-resources", "other_sdk=1"]
        result = farm.neuronc(*args, "--json")
    finally:
        farm.remove_node("other-sdk")
    assert result.returncode == 5, result.stderr
    [failed] = document(result, "compile-report")["builds"]
    assert (failed["status"], failed["exit_code"], failed["error"]["error"]) == (
        "failed",
        5,
        "environment_incompatible",
    )
    message = failed["error"]["message"]
    assert "has another toolchain than the one key" in message and ": fake-cc (on Ray node " in message
    assert failed["error"]["details"] == ["fake-cc: expected 1.2.3, here 9.9.9"]
    assert bundles_in(store, tmp_path) == []  # nothing published under the node's key
