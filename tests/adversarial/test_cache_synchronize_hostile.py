"""`cache synchronize` against hostile bundles, caches and target directories (issue 41: items 1, 3, 5,
6, 8, 9 and the Hub-fetched modules of the stack audit).

Bundles are written by hand (tests/adversarial/_bundles.py) around the optimum-neuron 0.4.5 test
vector of shared/testdata/hf-neuron-cache: the exported config.json and neuron_config.json whose
registry path optimum-neuron's own code computed, and a local compile cache holding the one graph
the bundle names. Every case runs the real command.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronc._output import out
from neuronc.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bundles import edit_manifest, neuronc, text, write_bundle

TESTDATA = Path("/work/shared/testdata/hf-neuron-cache")
if not TESTDATA.is_dir():  # the repository's copy of the vector, where the shared folder is absent
    TESTDATA = Path(__file__).resolve().parents[1] / "fixtures" / "hf-neuron-cache"
CC = "2.21.33363.0+82129205"
MODULE = f"neuronxcc-{CC}/MODULE_98ba4c9111d5882d2331+39f12043"
NEFF = b"NEFF" * 256
MODEL_ID = "example-org/tiny-llama"


def _vector() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    config = json.loads((TESTDATA / "llama_config.json").read_text())
    neuron = json.loads((TESTDATA / "f9f9f783a10b20b71829.json").read_text())["neuron"]
    return config, neuron, json.loads((TESTDATA / "expected.json").read_text())


def make(
    tmp_path: Path,
    *,
    neuron: Callable[[dict[str, Any]], object] | None = None,
    config: Callable[[dict[str, Any]], object] | None = None,
    modules: list[Any] | None = None,
    extra: Any = None,
) -> Path:
    """An optimum-neuron bundle of the test vector, and the compile cache (tmp_path/ncc) its graph is in."""
    cfg, nc, _ = _vector()
    if neuron is not None:
        neuron(nc)
    if config is not None:
        config(cfg)
    entry = tmp_path / "ncc" / MODULE
    entry.mkdir(parents=True)
    for name, data in {
        "model.neff": NEFF,
        "model.done": b"",
        "model.hlo_module.pb": b"HloModule x",
        "compile_flags.json": b'["--model-type=transformer"]',
    }.items():
        (entry / name).write_bytes(data)
    recorded = {"cache_dir": str(tmp_path / "ncc"), "modules": [MODULE] if modules is None else modules}
    return write_bundle(
        tmp_path / "bundle",
        "optimum-neuron",
        files={
            "artifacts/config.json": json.dumps(cfg).encode(),
            "artifacts/neuron_config.json": json.dumps(nc).encode(),
        },
        extra={"optimum_neuron": {"compile_cache": recorded}} if extra is None else extra,
    )


def invoke(*args: str | os.PathLike[str]) -> tuple[int, str, str]:
    out.reset()
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def sync_to(bundle: Path, target: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = invoke("cache", "synchronize", bundle, "--to", target, *extra, "--json")
    return code, json.loads(stdout), stderr


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()) if root.exists() else []


def test_the_test_vector_is_published_where_optimum_neuron_files_it(tmp_path: Path) -> None:
    _, _, expected = _vector()
    code, data, stderr = sync_to(make(tmp_path), tmp_path / "hub")
    assert code == 0, stderr
    [pub] = data["bundles"]
    assert (pub["registry_path"], pub["alias_path"]) == (expected["registry_path"], expected["alias_path"])
    assert (tmp_path / "hub" / MODULE / "model.neff").read_bytes() == NEFF
    assert not [p for p in files_under(tmp_path / "hub") if p.endswith(".tmp") or "neuronc-tmp" in p]


# -- item 1: links planted in a shared target directory ---------------------------------------------


def test_a_link_at_the_old_temporary_name_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    module_dir = tmp_path / "hub" / MODULE
    module_dir.mkdir(parents=True)
    (module_dir / "model.neff.neuronc-tmp").symlink_to(victim)
    code, _, stderr = sync_to(make(tmp_path), tmp_path / "hub")
    assert code == 0, stderr
    assert victim.read_bytes() == b"precious"
    assert not (module_dir / "model.neff").is_symlink() and (module_dir / "model.neff").read_bytes() == NEFF


@pytest.mark.parametrize("where", ["file", "folder", "compiler folder"])
def test_a_link_below_the_target_is_refused_before_anything_is_written(tmp_path: Path, where: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.neff").write_bytes(b"precious")
    hub = tmp_path / "hub"
    planted = {
        "file": hub / MODULE / "model.neff",
        "folder": hub / MODULE,
        "compiler folder": hub / MODULE.split("/")[0],
    }
    planted[where].parent.mkdir(parents=True, exist_ok=True)
    planted[where].symlink_to(victim / "model.neff" if where == "file" else victim)
    code, data, _ = sync_to(make(tmp_path), hub)
    assert code == 2 and data["error"] == "invalid_input"
    assert "symbolic link" in data["message"]
    assert (victim / "model.neff").read_bytes() == b"precious" and sorted(os.listdir(victim)) == ["model.neff"]
    assert not (hub / MODULE.split("/")[0] / "0_REGISTRY").exists()  # nothing written, not even the entry


# -- item 3: a FIFO named *.lock in the compile cache -------------------------------------------------


def test_a_fifo_lock_in_the_graph_folder_does_not_hang_synchronize(tmp_path: Path) -> None:
    """A graph still compiling (no model.done) whose lock is a FIFO: said locked, at once."""
    bundle = make(tmp_path)
    (tmp_path / "ncc" / MODULE / "model.done").unlink()
    os.mkfifo(tmp_path / "ncc" / MODULE / "model.hlo_module.pb.lock")
    proc = neuronc(
        "cache", "synchronize", bundle, "--to", tmp_path / "hub", "--model-id", MODEL_ID, "--json",
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, text(proc)
    [skipped] = json.loads(proc.stdout)["bundles"][0]["skipped"]
    assert skipped.startswith(MODULE) and "locked" in skipped
    assert files_under(tmp_path / "hub") == []


# -- item 5: the Hub offline or unreachable ----------------------------------------------------------


def test_an_upload_offline_or_to_an_unreachable_hub_is_exit_5(tmp_path: Path) -> None:
    bundle = make(tmp_path)
    args = ("cache", "synchronize", bundle, "--repo", "my-org/neuron-cache", "--json")
    proc = neuronc(*args, cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 5, text(proc)
    assert json.loads(proc.stdout)["error"] == "remote_store_error" and b"Traceback" not in proc.stderr
    env = {
        "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_TOKEN": "hf_test",
        "HF_HUB_ETAG_TIMEOUT": "2",
    }
    proc = neuronc(*args, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 5, text(proc)
    assert b"Traceback" not in proc.stderr
    assert "my-org/neuron-cache: cannot upload to the Hub" in json.loads(proc.stdout)["message"]


# -- item 6: registry paths built from the bundle's values ---------------------------------------------


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d.__setitem__(key, value)


@pytest.mark.parametrize(
    ("neuron", "message"),
    [
        (_set("neuronxcc_version", "../../../../escaped"), "neuronxcc_version"),
        (_set("neuronxcc_version", {"a": 1}), "neuronxcc_version"),
        (_set("optimum_neuron_version", "0.4.5/../../x"), "optimum_neuron_version"),
        (_set("optimum_neuron_version", "0.4.5\nx"), "optimum_neuron_version"),
        (_set("optimum_neuron_version", "/abs"), "optimum_neuron_version"),
        (_set("checkpoint_id", "../escaped"), "checkpoint_id"),
        (_set("checkpoint_id", "./model"), "checkpoint_id"),
        (_set("checkpoint_id", ["org", "name"]), "checkpoint_id"),
        (_set("checkpoint_id", "org/na\nme"), "checkpoint_id"),
    ],
)
def test_every_path_part_is_checked_against_the_layout(
    tmp_path: Path, neuron: Callable[[dict[str, Any]], object], message: str
) -> None:
    code, data, stderr = sync_to(make(tmp_path, neuron=neuron), tmp_path / "hub")
    assert code == 2, stderr
    [pub] = data["bundles"]
    assert not pub["published"] and any(message in s for s in pub["skipped"]), pub["skipped"]
    assert files_under(tmp_path / "hub") == []
    assert not (tmp_path / "escaped").exists() and not Path("/abs").exists()


@pytest.mark.parametrize("model_id", ["a/../b", "../x", "a/b/c", "org/name\n# x", "-x/y"])
def test_a_model_id_flag_that_is_no_hub_id_is_refused(tmp_path: Path, model_id: str) -> None:
    code, data, _ = sync_to(
        make(tmp_path, neuron=_set("checkpoint_id", None)), tmp_path / "hub", "--model-id", model_id
    )
    assert code == 2 and data["error"] == "invalid_input" and "--model-id" in data["message"]
    assert files_under(tmp_path / "hub") == []


def test_a_bad_module_name_is_refused_before_any_module_is_copied(tmp_path: Path) -> None:
    """One good graph and one hostile name: nothing of the bundle is written (no half-written tree)."""
    bundle = make(tmp_path, modules=[MODULE, f"neuronxcc-{CC}/MODULE_1+aaaaaaaa/../../../escaped"])
    code, data, _ = sync_to(bundle, tmp_path / "hub")
    assert code == 2
    assert any("MODULE_" in s for s in data["bundles"][0]["skipped"])
    assert files_under(tmp_path / "hub") == []


def test_an_edited_bundle_is_not_published_under_the_id_it_now_names(tmp_path: Path) -> None:
    bundle = make(tmp_path)
    config = bundle / "artifacts" / "neuron_config.json"
    edited = json.loads(config.read_text())
    edited["checkpoint_id"] = "victim-org/their-model"
    config.write_text(json.dumps(edited))
    code, data, _ = sync_to(bundle, tmp_path / "hub")
    assert code == 4 and data["error"] == "verification_failed"
    assert "artifacts/neuron_config.json" in "\n".join(data["details"])
    assert files_under(tmp_path / "hub") == []


# -- item 8: --to write failures -----------------------------------------------------------------------


@pytest.mark.parametrize("obstacle", ["parent is a file", "directory in the way", "read-only target", "--to a file"])
def test_a_target_that_cannot_be_written_is_one_error_line(tmp_path: Path, obstacle: str) -> None:
    hub = tmp_path / "hub"
    if obstacle == "parent is a file":
        hub.mkdir()
        (hub / MODULE.split("/")[0]).write_bytes(b"x")
    elif obstacle == "directory in the way":
        (hub / MODULE / "model.neff").mkdir(parents=True)
    elif obstacle == "read-only target":
        (hub / MODULE).mkdir(parents=True)
        (hub / MODULE / "model.neff").write_bytes(b"old")
        (hub / MODULE / "model.neff").chmod(0o444)
    else:
        hub.write_bytes(b"x")
    before = files_under(hub) if hub.is_dir() else None
    code, data, _ = sync_to(make(tmp_path), hub)
    assert code == 2 and data["error"] == "invalid_input", data
    assert (files_under(hub) if hub.is_dir() else None) == before  # nothing written, no temporary file


def test_a_full_disk_is_exit_5_and_leaves_no_temporary_file(tmp_path: Path, small_fs: Callable[..., Path]) -> None:
    disk = small_fs(64 * 1024)
    hub = disk / "hub"
    bundle = make(tmp_path)
    (tmp_path / "ncc" / MODULE / "model.neff").write_bytes(b"N" * (256 * 1024))
    code, data, _ = sync_to(bundle, hub)
    assert code == 5 and data["error"] == "disk_full", data
    assert not [p for p in files_under(hub) if p.endswith(".tmp")]


def test_ctrl_c_while_a_file_is_copied_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The writer's temporary file goes with the KeyboardInterrupt (a SIGALRM handler stands in for Ctrl-C)."""
    from neuronc.fsutil import atomic_write_at

    read_end, write_end = os.pipe()
    os.write(write_end, b"partial")
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write_at(folder, "model.neff", read_end)  # blocks on the pipe: the writer never closes it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for fd in (read_end, write_end, folder):
            os.close(fd)
    assert os.listdir(tmp_path) == []


# -- item 9: ill-typed values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    [
        {"extra": {"optimum_neuron": ["not", "an", "object"]}},
        {"extra": {"optimum_neuron": {"compile_cache": "x"}}},
        {"modules": {"a": 1}},
        {"modules": [1, None, {"x": 1}]},
        {"config": _set("hidden_size", "wide")},
        {"config": _set("model_type", ["llama"])},
        {"neuron": _set("torch_dtype", {"x": 1})},
    ],
)
def test_ill_typed_values_are_reasons_not_tracebacks(tmp_path: Path, hostile: dict[str, Any]) -> None:
    code, data, stderr = sync_to(make(tmp_path, **copy.copy(hostile)), tmp_path / "hub")
    assert code in (0, 2), stderr
    if code == 2:
        assert data["bundles"][0]["skipped"]
        assert files_under(tmp_path / "hub") == []


def test_an_ill_typed_resealed_manifest_is_no_traceback(tmp_path: Path) -> None:
    bundle = make(tmp_path)
    edit_manifest(bundle, lambda m: m["profile"].__setitem__("model", "not an object"))
    code, _, stderr = invoke("cache", "synchronize", bundle, "--to", tmp_path / "hub", "--model-id", MODEL_ID)
    assert code in (0, 2, 4), stderr
    edit_manifest(bundle, lambda m: m["profile"].__setitem__("model", {"id": "x/y", "task": {"a": 1}}))
    code, data, _ = sync_to(bundle, tmp_path / "hub2", "--model-id", MODEL_ID)
    assert code == 2 and "profile.model.task" in json.dumps(data), data  # the manifest's own schema says
    edit_manifest(bundle, lambda m: m["profile"].__setitem__("model", {"id": "x/y", "task": "text-generation\n../x"}))
    code, data, _ = sync_to(bundle, tmp_path / "hub2", "--model-id", MODEL_ID)
    assert code == 2 and any("model.task" in s for s in data["bundles"][0]["skipped"]), data
    assert files_under(tmp_path / "hub") == files_under(tmp_path / "hub2") == []


# -- the stack audit: graphs optimum-neuron fetched from a Hub cache are links into the HF cache -------


def _hub_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, name: str | None = None) -> Path:
    """The bundle's model.neff replaced by a link to a blob of a Hugging Face cache, as optimum-neuron links it."""
    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    blobs = hub_cache / "models--aws-neuron--optimum-neuron-cache" / "blobs"
    blobs.mkdir(parents=True)
    blob = blobs / (name or hashlib.sha256(content).hexdigest())
    blob.write_bytes(content)
    bundle = make(tmp_path)
    neff = tmp_path / "ncc" / MODULE / "model.neff"
    neff.unlink()
    neff.symlink_to(blob)
    return bundle


def test_a_hub_fetched_graph_is_published_with_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, data, stderr = sync_to(_hub_fetched(tmp_path, monkeypatch, b"FETCHED NEFF"), tmp_path / "hub")
    assert code == 0, stderr
    published = tmp_path / "hub" / MODULE / "model.neff"
    assert not published.is_symlink() and published.read_bytes() == b"FETCHED NEFF"
    assert data["bundles"][0]["published"]


def test_a_link_out_of_the_hub_cache_or_to_a_wrong_blob_leaves_the_entry_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = _hub_fetched(tmp_path, monkeypatch, b"NOT WHAT THE NAME SAYS", name="ab" * 32)
    code, data, _ = sync_to(bundle, tmp_path / "hub")
    assert code == 2 and any("model.neff" in s and "blob name" in s for s in data["bundles"][0]["skipped"])
    assert files_under(tmp_path / "hub") == []
    secret = tmp_path / "secret"
    secret.write_bytes(b"private key")
    neff = tmp_path / "ncc" / MODULE / "model.neff"
    neff.unlink()
    neff.symlink_to(secret)
    code, data, _ = sync_to(bundle, tmp_path / "hub")
    assert code == 2 and any("not to a blob" in s for s in data["bundles"][0]["skipped"])
    assert files_under(tmp_path / "hub") == []
