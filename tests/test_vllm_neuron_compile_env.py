"""The vllm-neuron compile's own environment: a local cache root (never NFS/Lustre), the KV block count.

The compiles run the real pipeline through the SDK doubles (the stand-in docker running the release's
"DLC image"; tests/sdk_doubles). Which filesystem a path is on is read from /proc/self/mountinfo; the
tests point ``neuronc.backends.vllm_neuron.localfs.MOUNTINFO`` at a table in the kernel's format that
puts the store's work tree (and, in the second test, the temporary directory) on NFS.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from sdk_doubles.fixtures import FakeRuntime
from test_backend_vllm_neuron import invoke, write_profile

from neuronc.backends.vllm_neuron import localfs
from neuronc.bundle import read_manifest, verify_bundle


def _mountinfo(tmp_path: Path, remote: dict[Path, str]) -> Path:
    """A mountinfo table (proc(5)): / on ext4, each of ``remote`` on its filesystem type."""
    lines = ["22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/root rw"]
    for i, (mount, fs_type) in enumerate(remote.items()):
        escaped = str(mount).replace(" ", "\\040")
        lines.append(f"{40 + i} 22 0:{50 + i} / {escaped} rw,relatime shared:{5 + i} - {fs_type} srv:/export rw")
    table = tmp_path / "mountinfo"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return table


def test_the_filesystem_type_is_the_longest_mount_prefix(tmp_path: Path) -> None:
    table = _mountinfo(tmp_path, {tmp_path / "shared dir": "nfs4", tmp_path / "shared dir/lus": "lustre"})
    assert localfs.filesystem_type(tmp_path / "x", table) == "ext4"
    assert localfs.filesystem_type(tmp_path / "shared dir" / "a", table) == "nfs4"
    assert localfs.filesystem_type(tmp_path / "shared dir" / "lus" / "b", table) == "lustre"
    assert localfs.filesystem_type(tmp_path / "shared dirx", table) == "ext4"  # a prefix of the name is not a mount
    assert [localfs.is_remote(t) for t in ("nfs", "nfs4", "lustre", "ext4", "xfs", None)] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_work_tree_on_nfs_compiles_into_a_local_cache_root(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images()
    store = tmp_path / "store"
    monkeypatch.setattr(localfs, "MOUNTINFO", _mountinfo(tmp_path, {store: "nfs4"}))
    before = set(Path(tempfile.gettempdir()).glob("neuronc-vllm-cache-*"))
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(store))
    assert code == 0, (report, err)
    bundle = Path(report["builds"][0]["bundle"])
    assert verify_bundle(bundle).ok and read_manifest(bundle).extra["vllm_neuron"]["cache_keys"]
    (run,) = fake_runtime.runs()
    staged = [m for m in run["mounts"] if m[1] == "/neuronc/vllm-cache"]
    assert len(staged) == 1 and Path(staged[0][0]).parent == Path(tempfile.gettempdir())
    assert not str(staged[0][0]).startswith(str(store))
    # The temporary cache root is gone: its entries moved into the bundle.
    assert set(Path(tempfile.gettempdir()).glob("neuronc-vllm-cache-*")) == before


def test_with_no_local_filesystem_the_build_stops_before_compiling(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_runtime.add_release_images()
    store, scratch = tmp_path / "store", tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(localfs, "MOUNTINFO", _mountinfo(tmp_path, {store: "nfs", scratch: "lustre"}))
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.32'")
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(store))
    assert code == 5
    error = report["builds"][0]["error"]
    assert "refuses a compile cache on NFS/Lustre" in error["message"] and str(scratch) in error["message"]
    assert "TMPDIR" in error["hint"]
    assert fake_runtime.runs() == []  # nothing compiled
    code, report, _ = invoke("compile", str(profile), "--json", "--store", str(store), "--require-hit")
    assert code == 6  # nothing half-written in the store


def test_a_pinned_block_count_is_the_one_compiled_and_served(
    tmp_path: Path, tiny_llama: Path, fake_runtime: FakeRuntime
) -> None:
    fake_runtime.add_release_images()
    profile = write_profile(tmp_path, tiny_llama, extra="sdk: '2.31.1'\noptions: {num_gpu_blocks_override: 777}")
    code, report, err = invoke("compile", str(profile), "--json", "--store", str(tmp_path / "store"))
    assert code == 0, (report, err)
    info = read_manifest(Path(report["builds"][0]["bundle"])).extra["vllm_neuron"]
    assert info["num_gpu_blocks"] == 777
    args = info["engine_args"]
    assert args[args.index("--num-gpu-blocks-override") + 1] == "777"
    (run,) = fake_runtime.runs()
    # Below 0.29 the route stays unset, the plugin's own default (facts.route_to_set).
    assert "VLLM_NEURON_BACKEND" not in run["env"] and info["route"] is None
