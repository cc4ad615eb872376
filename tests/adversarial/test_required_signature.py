"""A required signature, everywhere a bundle is handed on (issue 34, items 2 and "compile --out").

docs/bundles.md's threat model has a table: for each way someone who can write a store could change
a signed bundle (rows), what each command that enforces a required signature does with it
(columns). This test reads that table and runs every cell: `verify`, `deploy` and `store fetch
--out` on a realistic nxdi bundle, `compile --out` on a store hit of the pipeline test backend. A
refused bundle is exit 4 and nothing is written where it would go. The real model-signing library
signs and verifies; the commands run in-process (Click's runner) to keep 56 cells fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("model_signing", reason="the sign extra (model-signing, pyopenssl) is not installed")

from _bundles import edit_manifest, write_bundle
from _signing import KeyPair, ec_key
from click.testing import CliRunner

from neuronc._output import out
from neuronc.bundle.signature import SIGNATURE_NAME
from neuronc.bundle.signing import sign_bundle
from neuronc.bundle.signing_material import Signer
from neuronc.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "bundles.md"
COLUMNS = ("`verify`", "`deploy`", "`store fetch --out`", "`compile --out` (hit)")


def _add(rel: str, data: bytes = b"planted\n") -> Callable[[Path, KeyPair], None]:
    def tamper(bundle: Path, key: KeyPair) -> None:
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_bytes(data)

    return tamper


def _swap(bundle: Path, key: KeyPair) -> None:
    entry = next(f for f in json.loads((bundle / "manifest.json").read_text())["files"] if f["role"] != "profile")
    data = b"evil bytes\n"
    (bundle / entry["path"]).write_bytes(data)

    def edit(m: dict[str, Any]) -> None:
        for f in m["files"]:
            if f["path"] == entry["path"]:
                f.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        for shard in m.get("shards") or []:
            if shard["file"] == entry["path"]:
                shard.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    edit_manifest(bundle, edit)


def _add_listed(bundle: Path, key: KeyPair) -> None:
    data = b"\x7fELF planted\n"
    (bundle / "artifacts" / "libhook.so").write_bytes(data)
    entry = {"path": "artifacts/libhook.so", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    edit_manifest(bundle, lambda m: m["files"].append({**entry, "role": "artifact"}))


def _drop_listed(bundle: Path, key: KeyPair) -> None:
    (bundle / "profile.yaml").unlink()
    edit_manifest(bundle, lambda m: m.update(files=[f for f in m["files"] if f["path"] != "profile.yaml"]))


def _stranger(bundle: Path, key: KeyPair) -> None:
    sign_bundle(bundle, Signer.choose(key=ec_key(bundle.parent / f"stranger-{os.getpid()}").private))


def _other_signature(bundle: Path, key: KeyPair) -> None:
    other = write_bundle(bundle.parent / "other-bundle", "nxdi", files={"artifacts/model.pt": b"other\n"})
    sign_bundle(other, Signer.choose(key=key.private))
    shutil.copy(other / SIGNATURE_NAME, bundle / SIGNATURE_NAME)
    shutil.rmtree(other)


def _symlink(bundle: Path, key: KeyPair) -> None:
    (bundle / "artifacts" / "link").symlink_to("/etc/hostname")


CASES: dict[str, Callable[[Path, KeyPair], None] | None] = {
    "untouched": None,
    "unsigned": lambda b, k: (b / SIGNATURE_NAME).unlink(),
    "a file swapped, manifest re-sealed": _swap,
    "a manifest value changed, re-sealed": lambda b, k: edit_manifest(b, lambda m: m["host"].update(hostname="x")),
    "a file added and listed, re-sealed": _add_listed,
    "a listed file removed, re-sealed": _drop_listed,
    "a file added, not listed": _add("artifacts/libhook.so"),
    "`.git/config` added": _add(".git/config", b"[core]\n\tfsmonitor = touch /tmp/pwned\n"),
    "`.github/workflows/ci.yml` added": _add(".github/workflows/ci.yml"),
    "`.gitattributes` added": _add(".gitattributes", b"* filter=evil\n"),
    "`.gitignore` added": _add(".gitignore"),
    "signed again by another key": _stranger,
    "the signature of another bundle": _other_signature,
    "a symlink added": _symlink,
}


def documented_table() -> dict[str, dict[str, str]]:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("<!-- required-signature table")
    end = text.index("<!-- end of the required-signature table -->")
    rows = [line for line in text[start:end].splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert tuple(header[1:]) == COLUMNS, header
    table: dict[str, dict[str, str]] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[cells[0]] = dict(zip(COLUMNS, cells[1:], strict=True))
    return table


def test_the_documented_table_has_a_case_for_every_row() -> None:
    table = documented_table()
    assert list(table) == list(CASES)
    for case, cells in table.items():
        expected = "accepted" if case == "untouched" else "refused"
        assert set(cells.values()) == {expected}, (case, cells)


def _cli(*args: str | Path, env: dict[str, str]) -> Any:
    out.reset()
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return ec_key(tmp_path_factory.mktemp("ci-key"))


def _trust(key: KeyPair, tmp: Path) -> dict[str, str]:
    return {
        "NEURONC_REQUIRE_SIGNATURE": "1",
        "NEURONC_SIGNATURE_KEY": str(key.public),
        "NEURONC_STORE": str(tmp / "unused-store"),
        "HF_HUB_OFFLINE": "1",
    }


def _expect(result: Any, case: str, column: str, written: Path | None) -> None:
    expected = documented_table()[case][column]
    if expected == "accepted":
        assert result.exit_code == 0, (case, column, result.output)
        assert written is None or written.exists(), (case, column)
    else:
        assert result.exit_code == 4, (case, column, result.output)
        assert written is None or not written.exists(), (case, column)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_verify_deploy_and_store_fetch(tmp_path: Path, key: KeyPair, case: str) -> None:
    env = _trust(key, tmp_path)
    tamper = CASES[case]
    bundle = write_bundle(tmp_path / "bundle", "nxdi")
    sign_bundle(bundle, Signer.choose(key=key.private))
    store = tmp_path / "store"
    published = _cli("store", "publish", bundle, "--store", store, "--json", env=env)
    assert published.exit_code == 0, published.output
    stored = Path(json.loads(published.stdout)["location"])
    assert (stored / SIGNATURE_NAME).is_file()
    if tamper is not None:
        tamper(bundle, key)
        tamper(stored, key)

    _expect(_cli("verify", bundle, "--json", env=env), case, "`verify`", None)

    deployed = _cli("deploy", bundle, "--for", "vllm", "--out", tmp_path / "deploy", "--json", env=env)
    _expect(deployed, case, "`deploy`", tmp_path / "deploy")

    key_prefix = json.loads((stored / "manifest.json").read_text())["config_hash"][:12]
    fetched = _cli("store", "fetch", key_prefix, "--store", store, "--out", tmp_path / "fetched", "--json", env=env)
    _expect(fetched, case, "`store fetch --out`", tmp_path / "fetched")


# -- compile --out of a store hit ------------------------------------------------------------------


@pytest.fixture(scope="module")
def signed_store(tmp_path_factory: pytest.TempPathFactory, key: KeyPair) -> Iterator[tuple[Path, Path, Path]]:
    """A store holding one signed bundle of the pipeline test backend, its profile, and a pristine copy."""
    from _pipeline import write_profile, write_tiny_llama
    from plugins import pipeline_backend

    root = tmp_path_factory.mktemp("compile-hit")
    pipeline_backend.register()
    try:
        write_tiny_llama(root / "model")
        profile = write_profile(root / "p.yaml")
        store = root / "store"
        env = {"NEURONC_SIGNING_KEY": str(key.private), "HF_HUB_OFFLINE": "1"}
        built = _cli("compile", profile, "--store", store, "--sign", "--json", env=env)
        assert built.exit_code == 0, built.output
        bundle = Path(json.loads(built.stdout)["builds"][0]["bundle"])
        pristine = root / "pristine"
        shutil.copytree(bundle, pristine, symlinks=True)
        yield profile, bundle, pristine
    finally:
        pipeline_backend.unregister()


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_compile_out_of_a_store_hit(
    tmp_path: Path, key: KeyPair, signed_store: tuple[Path, Path, Path], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plugins import pipeline_backend

    profile, bundle, pristine = signed_store
    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    try:
        shutil.rmtree(bundle)
        shutil.copytree(pristine, bundle, symlinks=True)
        tamper = CASES[case]
        if tamper is not None:
            tamper(bundle, key)
        env = _trust(key, tmp_path)
        result = _cli("compile", profile, "--store", bundle.parents[2], "--out", tmp_path / "o", "--json", env=env)
        data = json.loads(result.stdout)
        status = data["builds"][0]["status"]
        if documented_table()[case]["`compile --out` (hit)"] == "accepted":
            assert result.exit_code == 0 and status == "hit", result.output
            assert (tmp_path / "o" / "manifest.json").is_file()
        else:
            assert result.exit_code == 4 and status == "failed", (case, result.output)
            assert data["builds"][0]["error"]["error"] in {"signature_invalid", "signature_missing"}, result.output
            assert not (tmp_path / "o").exists(), case
        assert not (tmp_path / "compiles.log").exists()  # a hit: nothing compiled
    finally:
        pipeline_backend.unregister()


def test_a_required_signature_with_nothing_to_trust_stops_compile_out_before_any_build(
    tmp_path: Path, signed_store: tuple[Path, Path, Path]
) -> None:
    profile, bundle, _ = signed_store
    env = {"NEURONC_REQUIRE_SIGNATURE": "1", "HF_HUB_OFFLINE": "1"}
    result = _cli("compile", profile, "--store", bundle.parents[2], "--out", tmp_path / "o", "--json", env=env)
    assert result.exit_code == 2, result.output
    assert re.search(r"needs something to trust", result.output)
    assert not (tmp_path / "o").exists()
