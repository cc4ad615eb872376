"""Signed bundles against someone who can write to the store (issue 22, "Signed bundles").

A bundle's seal is a SHA-256 of its own manifest: anyone who can write a bundle can change it and
seal it again. A signature made where the bundle was built (a key only CI holds) is what a deploy
host can check. Each case here signs a bundle with the real OpenSSF model-signing library, alters
it the way a store writer could, and runs real ``neuronc`` processes: ``verify --signature`` and
``deploy --require-signature`` must refuse it (exit 4, nothing written), the untouched bundle must
pass, and model-signing's own ``model_signing verify`` must agree. The S3 round trip (SeaweedFS)
is the issue's "done when": built, signed, pushed, altered in the bucket, fetched, refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("model_signing", reason="the sign extra (model-signing, pyopenssl) is not installed")

from _bundles import edit_manifest, neuronc, seal, text, write_bundle
from _seaweedfs import SeaweedFS, use_server_and_make_bucket
from _signing import KeyPair, ec_key, model_signing_verify

from neuronc.bundle import read_manifest
from neuronc.bundle.signature import SIGNATURE_NAME, signature_limit
from neuronc.bundle.signing import sign_bundle
from neuronc.bundle.signing_material import Signer


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return ec_key(tmp_path_factory.mktemp("ci-key"))


def signed_bundle(dest: Path, key: KeyPair, files: dict[str, bytes] | None = None) -> Path:
    bundle = write_bundle(dest, "nxdi", files=files)
    sign_bundle(bundle, Signer.choose(key=key.private))
    return bundle


def swap_file(bundle: Path, rel: str, data: bytes) -> None:
    """Replace a file and its manifest entry, and seal the manifest again: every integrity check passes."""
    (bundle / rel).write_bytes(data)

    def edit(manifest: dict[str, Any]) -> None:
        for entry in manifest["files"]:
            if entry["path"] == rel:
                entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())

    edit_manifest(bundle, edit)


def add_listed_file(bundle: Path) -> None:
    data = b"\x7fELF planted\n"
    (bundle / "artifacts" / "libhook.so").write_bytes(data)
    entry = {"path": "artifacts/libhook.so", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    edit_manifest(bundle, lambda m: m["files"].append({**entry, "role": "artifact"}))


def drop_listed_file(bundle: Path) -> None:
    (bundle / "profile.yaml").unlink()
    edit_manifest(bundle, lambda m: m.update(files=[f for f in m["files"] if f["path"] != "profile.yaml"]))


def forge_payload(bundle: Path) -> None:
    """Swap a file, then rewrite the signed statement to its new digest, keeping the signature bytes."""
    old = (bundle / "artifacts" / "model.pt").read_bytes()
    swap_file(bundle, "artifacts/model.pt", b"evil weights\n")
    sig = json.loads((bundle / SIGNATURE_NAME).read_text())
    payload = base64.b64decode(sig["dsseEnvelope"]["payload"]).decode()
    payload = payload.replace(hashlib.sha256(old).hexdigest(), hashlib.sha256(b"evil weights\n").hexdigest())
    manifest_digest = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    statement = json.loads(payload)
    for resource in statement["predicate"]["resources"]:
        if resource["name"] == "manifest.json":
            resource["digest"] = manifest_digest
    sig["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (bundle / SIGNATURE_NAME).write_text(json.dumps(sig))


def other_bundles_signature(bundle: Path, key: KeyPair) -> None:
    """The signature of another bundle, signed by the same trusted key (a replayed signature)."""
    other = signed_bundle(bundle.parent / "other", key, {"artifacts/model.pt": b"other\n"})
    shutil.copy(other / SIGNATURE_NAME, bundle / SIGNATURE_NAME)


def resigned_by_a_stranger(bundle: Path, key: KeyPair) -> None:
    sign_bundle(bundle, Signer.choose(key=ec_key(bundle.parent / "stranger").private))


def symlinked_signature(bundle: Path, key: KeyPair) -> None:
    other = signed_bundle(bundle.parent / "other", key)
    (bundle / SIGNATURE_NAME).unlink()
    (bundle / SIGNATURE_NAME).symlink_to(other / SIGNATURE_NAME)


# case: (tamper, the error verify reports first, whether model_signing's own verifier must refuse too)
TAMPERS: dict[str, tuple[Callable[[Path, KeyPair], None], str, bool]] = {
    "file swapped, manifest re-sealed": (
        lambda b, k: swap_file(b, "artifacts/model.pt", b"evil weights\n"),
        "signature_invalid",
        True,
    ),
    "manifest value changed and re-sealed": (
        lambda b, k: edit_manifest(b, lambda m: m["host"].update(hostname="ci-runner-7")),
        "signature_invalid",
        True,
    ),
    "file added, not listed": (
        lambda b, k: (b / "artifacts" / "libhook.so").write_bytes(b"\x7fELF\n"),
        "verification_failed",
        True,
    ),
    "file added and listed, re-sealed": (lambda b, k: add_listed_file(b), "signature_invalid", True),
    "file removed and unlisted, re-sealed": (lambda b, k: drop_listed_file(b), "signature_invalid", True),
    "signed statement forged": (lambda b, k: forge_payload(b), "signature_invalid", True),
    "signature of another bundle": (other_bundles_signature, "signature_invalid", True),
    "signed again by another key": (resigned_by_a_stranger, "signature_invalid", True),
    "signature removed": (lambda b, k: (b / SIGNATURE_NAME).unlink(), "signature_missing", False),
    "signature is a symlink": (symlinked_signature, "verification_failed", False),
    "signature is not JSON": (lambda b, k: (b / SIGNATURE_NAME).write_bytes(b"\x00garbage"), "signature_invalid", True),
}


def test_the_untouched_signed_bundle_passes_everywhere(tmp_path: Path, key: KeyPair) -> None:
    bundle = signed_bundle(tmp_path / "bundle", key)
    verified = neuronc("verify", bundle, "--signature", "--key", key.public, "--json", cwd=tmp_path)
    assert verified.returncode == 0, text(verified)
    assert json.loads(verified.stdout)["signature"]["verified"] is True
    deployed = neuronc(
        "deploy", bundle, "--for", "vllm", "--out", tmp_path / "deploy", "--require-signature", "--json",
        cwd=tmp_path, env={"NEURONC_SIGNATURE_KEY": str(key.public)},
    )  # fmt: skip
    assert deployed.returncode == 0, text(deployed)
    assert json.loads(deployed.stdout)["signature"]["method"] == "key"
    assert model_signing_verify(bundle, "key", "--public_key", str(key.public)).returncode == 0


@pytest.mark.parametrize("case", TAMPERS, ids=list(TAMPERS))
def test_an_altered_bundle_is_refused(tmp_path: Path, key: KeyPair, case: str) -> None:
    tamper, first_error, library_refuses = TAMPERS[case]
    bundle = signed_bundle(tmp_path / "bundle", key)
    tamper(bundle, key)

    verified = neuronc("verify", bundle, "--signature", "--key", key.public, "--json", cwd=tmp_path)
    assert verified.returncode == 4, text(verified)
    report = json.loads(verified.stdout)
    assert report["ok"] is False and report["error"]["error"] == first_error, report["error"]

    # A deploy host that requires signatures (the variables a CI job sets) writes nothing for it.
    out_dir = tmp_path / "deploy"
    env = {"NEURONC_REQUIRE_SIGNATURE": "1", "NEURONC_SIGNATURE_KEY": str(key.public)}
    deployed = neuronc("deploy", bundle, "--for", "vllm", "--out", out_dir, "--json", cwd=tmp_path, env=env)
    assert deployed.returncode == 4, text(deployed)
    assert json.loads(deployed.stdout)["error"] in {"signature_invalid", "signature_missing"}
    assert not out_dir.exists()

    if library_refuses:  # model-signing's own verifier agrees (a symlinked or missing file: it cannot read one)
        assert model_signing_verify(bundle, "key", "--public_key", str(key.public)).returncode != 0


# -- the "done when": S3, altered in the bucket ------------------------------------------


@pytest.fixture
def bucket(s3_server: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_server_and_make_bucket(s3_server, monkeypatch)


class Host:
    """A machine with its own remote-store cache: the CI builder, or a deploy host."""

    def __init__(self, root: Path, key: KeyPair) -> None:
        self.root = root
        self.key = key
        root.mkdir(parents=True, exist_ok=True)
        self.env = {"NEURONC_REMOTE_CACHE": str(root / "remote-cache")}

    def run(self, *args: str | Path, env: dict[str, str] | None = None) -> Any:
        return neuronc(*args, cwd=self.root, env={**self.env, **(env or {})})

    def trust(self) -> dict[str, str]:
        return {"NEURONC_REQUIRE_SIGNATURE": "1", "NEURONC_SIGNATURE_KEY": str(self.key.public)}


def _s3() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


def _refused_on_a_fresh_host(root: Path, key: KeyPair, store: str, url: str, kind: set[str]) -> None:
    """verify --signature of the URL, then store fetch + deploy --require-signature: all refuse."""
    host = Host(root, key)
    verified = host.run("verify", url, "--signature", "--key", key.public, "--json")
    assert verified.returncode == 4, text(verified)
    document = json.loads(verified.stdout)
    error = document["error"]  # the report's error object, or the error object itself (nothing fetched)
    assert (error["error"] if isinstance(error, dict) else error) in kind, document
    fetched = host.run("store", "fetch", url.removeprefix(store + "/"), "--store", store, "--out", root / "b")
    if fetched.returncode == 0:  # a consistent alteration fetches: only the signature can tell
        deployed = host.run("deploy", root / "b", "--for", "vllm", "--out", root / "deploy", env=host.trust())
        assert deployed.returncode == 4, text(deployed)
        assert not (root / "deploy").exists()
        if (root / "b" / SIGNATURE_NAME).exists():
            assert model_signing_verify(root / "b", "key", "--public_key", str(key.public)).returncode == 1
    else:  # bytes that do not match their object's name never leave the bucket
        assert fetched.returncode == 4, text(fetched)
    refused = host.run("store", "fetch", url.removeprefix(store + "/"), "--store", store, env=host.trust())
    assert refused.returncode == 4, text(refused)


@pytest.mark.s3
def test_signed_bundle_altered_in_s3_is_refused_and_the_untouched_one_passes(
    tmp_path: Path, bucket: str, key: KeyPair
) -> None:
    cases = (
        "untouched",
        "manifest re-sealed",
        "manifest re-sealed, signature copied",
        "file swapped",
        "object bytes",
        "signature oversized",
    )
    fs = _s3()
    for i, case in enumerate(cases):
        store = f"s3://{bucket}/case{i}"
        builder = Host(tmp_path / f"ci{i}", key)
        bundle = write_bundle(builder.root / "bundle", "nxdi")
        published = builder.run(
            "store", "publish", bundle, "--store", store, "--sign", "--json",
            env={"NEURONC_SIGNING_KEY": str(key.private)},
        )  # fmt: skip
        assert published.returncode == 0, text(published)
        url = json.loads(published.stdout)["location"]
        rel = url.removeprefix(store + "/")
        raw = (bundle / "manifest.json").read_bytes()
        signature_path = f"{bucket}/case{i}/{rel}/signatures/{hashlib.sha256(raw).hexdigest()}.sig"
        assert fs.cat_file(signature_path) == (bundle / SIGNATURE_NAME).read_bytes()  # uploaded with it

        deploy_host = tmp_path / f"deploy{i}"
        if case == "untouched":
            host = Host(deploy_host, key)
            assert host.run("verify", url, "--signature", "--key", key.public).returncode == 0
            fetched = host.run(
                "store", "fetch", rel, "--store", store, "--out", deploy_host / "b", "--json", env=host.trust()
            )
            assert fetched.returncode == 0, text(fetched)
            assert json.loads(fetched.stdout)["signature"]["verified"] is True
            deployed = host.run(
                "deploy", deploy_host / "b", "--for", "vllm", "--out", deploy_host / "d", env=host.trust()
            )
            assert deployed.returncode == 0, text(deployed)
            assert model_signing_verify(deploy_host / "b", "key", "--public_key", str(key.public)).returncode == 0
            continue

        manifest = json.loads(raw)
        if case == "signature oversized":  # a reader downloads no more than an honest signature can have
            fs.pipe_file(signature_path, b"{" + b" " * (signature_limit(read_manifest(bundle)) + 10) + b"}")
            _refused_on_a_fresh_host(deploy_host, key, store, url, {"signature_invalid"})
            assert (deploy_host / "b" / SIGNATURE_NAME).stat().st_size == signature_limit(read_manifest(bundle)) + 1
            continue
        if case == "object bytes":
            victim = next(f for f in manifest["files"] if f["path"] == "artifacts/model.pt")
            sha = victim["sha256"]
            fs.pipe_file(f"{bucket}/case{i}/.objects/sha256/{sha[:2]}/{sha}", b"x" * victim["size"])
            _refused_on_a_fresh_host(deploy_host, key, store, url, {"verification_failed"})
            continue
        if case == "file swapped":
            evil = b"evil weights\n"
            evil_sha = hashlib.sha256(evil).hexdigest()
            fs.pipe_file(f"{bucket}/case{i}/.objects/sha256/{evil_sha[:2]}/{evil_sha}", evil)
            for entry in manifest["files"]:
                if entry["path"] == "artifacts/model.pt":
                    entry.update(size=len(evil), sha256=evil_sha)
        else:
            manifest["host"]["hostname"] = "not-the-ci-runner"
        altered = seal(manifest).encode()
        assert altered != raw and read_manifest_of(altered)
        fs.pipe_file(f"{bucket}/case{i}/{rel}/manifest.json", altered)
        if case != "manifest re-sealed":  # the attacker also puts the old signature where the new manifest looks
            new_path = f"{bucket}/case{i}/{rel}/signatures/{hashlib.sha256(altered).hexdigest()}.sig"
            fs.pipe_file(new_path, fs.cat_file(signature_path))
            kinds = {"signature_invalid"}
        else:
            kinds = {"signature_missing"}
        _refused_on_a_fresh_host(deploy_host, key, store, url, kinds)


def read_manifest_of(raw: bytes) -> bool:
    """The altered manifest is a valid, sealed manifest: nothing but a signature can tell."""
    from neuronc.bundle import manifest_seal_problem, parse_manifest

    parse_manifest(raw)
    return manifest_seal_problem(raw) is None


def test_a_bundle_signed_elsewhere_verifies_here(tmp_path: Path, key: KeyPair) -> None:
    """The signature does not name the directory: a copy elsewhere (another host's path) verifies."""
    bundle = signed_bundle(tmp_path / "built-here", key)
    moved = tmp_path / "somewhere" / "else"
    moved.parent.mkdir()
    shutil.copytree(bundle, moved)
    assert read_manifest(moved).config_hash == read_manifest(bundle).config_hash
    proc = neuronc("verify", moved, "--key", key.public, cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
