"""Signed bundles (issue 22): `neuronc sign`, `verify --signature`, the signature in stores, `compile --sign`.

Everything runs the real OpenSSF model-signing library with keys and a CA chain generated here
(tests/_signing.py); nothing about it is mocked. Tampered and hostile bundles are in
tests/adversarial/test_signed_bundles.py, with the S3 round trip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("model_signing", reason="the sign extra (model-signing, pyopenssl) is not installed")

from _signing import SIGNER_EMAIL, ca_chain, ec_key, model_signing_verify, other_key
from click.testing import CliRunner
from plugins.fake_backend import NAME, build_bundle, register
from plugins.registry import unregister_backend

from neuronc._output import out
from neuronc.bundle import copy_bundle, read_manifest, verify_bundle
from neuronc.bundle.signature import SIGNATURE_NAME, parse_signature, signature_limit
from neuronc.bundle.signing import sign_bundle, verify_signature
from neuronc.bundle.signing_material import Signer, TrustRoot
from neuronc.cli import app
from neuronc.errors import SignatureError, SignatureMissingError
from neuronc.store import open_store


@pytest.fixture(autouse=True)
def _fake_backend() -> Iterator[None]:
    register()
    yield
    unregister_backend(NAME)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build_bundle(tmp_path / "bundle")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return ec_key(tmp_path_factory.mktemp("keys"))


def cli(runner: CliRunner, *args: str | Path, env: dict[str, str] | None = None) -> Any:
    out.reset()  # the output object caches consoles bound to the previous invocation's streams
    return runner.invoke(app, [str(a) for a in args], env=env)


def as_json(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# -- key mode ---------------------------------------------------------------------------------


def test_sign_then_verify_with_a_key(runner: CliRunner, bundle: Path, keys: Any) -> None:
    signed = cli(runner, "sign", bundle, "--key", keys.private, "--json")
    assert signed.exit_code == 0, signed.output
    report = as_json(signed)
    manifest = read_manifest(bundle)
    assert report["method"] == "key" and report["files"] == len(manifest.files) + 1  # the manifest is signed too
    assert report["signature"] == str(bundle / SIGNATURE_NAME)
    # The signature covers exactly the manifest's files, with the manifest's digests, plus the manifest.
    content = parse_signature((bundle / SIGNATURE_NAME).read_bytes())
    assert {p: d.split(":")[1] for p, d in content.resources.items() if p != "manifest.json"} == {
        f.path: f.sha256 for f in manifest.files
    }
    assert content.serialization["ignore_paths"] == [SIGNATURE_NAME]
    # What a remote store may make a reader download for it is bounded by the manifest's files.
    assert (bundle / SIGNATURE_NAME).stat().st_size < signature_limit(manifest) / 2
    # The signature is the one file the manifest cannot list: an unsigned check still passes.
    assert verify_bundle(bundle).ok
    assert cli(runner, "verify", bundle).exit_code == 0
    checked = cli(runner, "verify", bundle, "--key", keys.public, "--json")
    assert checked.exit_code == 0, checked.output
    data = as_json(checked)
    assert data["ok"] is True and data["signature"]["verified"] is True
    assert data["signature"]["trusted"] == f"public key {keys.public}"


def test_model_signing_cli_verifies_neuronc_signatures(tmp_path: Path, bundle: Path, keys: Any) -> None:
    """The signature is model-signing's own: its command line verifies it, and refuses another key's."""
    sign_bundle(bundle, Signer.choose(key=keys.private))
    ok = model_signing_verify(bundle, "key", "--public_key", str(keys.public))
    assert ok.returncode == 0, ok.stderr
    assert "Verification succeeded" in ok.stdout
    stranger = ec_key(tmp_path / "stranger")
    refused = model_signing_verify(bundle, "key", "--public_key", str(stranger.public))
    assert refused.returncode == 1, refused.stdout


@pytest.mark.parametrize("curve", ["P-256", "P-384", "P-521"])
def test_every_curve_model_signing_supports_signs(tmp_path: Path, bundle: Path, curve: str) -> None:
    pair = ec_key(tmp_path / "k", curve)
    sign_bundle(bundle, Signer.choose(key=pair.private))
    assert verify_signature(bundle, TrustRoot.choose(key=pair.public) or TrustRoot("x")).verified


@pytest.mark.parametrize("kind", ["ed25519", "rsa", "secp256k1"])
def test_keys_model_signing_cannot_use_are_a_clear_exit_2(
    runner: CliRunner, tmp_path: Path, bundle: Path, kind: str
) -> None:
    pair = ec_key(tmp_path / "k", "secp256k1") if kind == "secp256k1" else other_key(tmp_path / "k", kind)
    signed = cli(runner, "sign", bundle, "--key", pair.private, "--json")
    assert signed.exit_code == 2, signed.output
    error = as_json(signed)
    assert "P-256, P-384 or P-521 only" in error["message"] and "openssl ecparam" in error["hint"]
    assert not (bundle / SIGNATURE_NAME).exists()
    sign_bundle(bundle, Signer.choose(key=ec_key(tmp_path / "ok").private))
    checked = cli(runner, "verify", bundle, "--key", pair.public, "--json")
    assert checked.exit_code == 2, checked.output


def test_missing_or_unusable_key_files_are_exit_2(runner: CliRunner, tmp_path: Path, bundle: Path) -> None:
    missing = cli(runner, "sign", bundle, "--key", tmp_path / "nope.pem", "--json")
    assert missing.exit_code == 2 and "no such private key" in as_json(missing)["message"]
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    assert cli(runner, "sign", bundle, "--key", garbage).exit_code == 2
    assert cli(runner, "sign", bundle).exit_code == 2  # nothing to sign with
    missing_pub = cli(runner, "verify", bundle, "--key", tmp_path / "nope.pub", "--json")
    assert missing_pub.exit_code == 2 and "no such public key" in as_json(missing_pub)["message"]


def test_an_encrypted_key_takes_its_password_from_the_environment(
    runner: CliRunner, tmp_path: Path, bundle: Path
) -> None:
    pair = ec_key(tmp_path / "k", password=b"s3cret")
    locked = cli(runner, "sign", bundle, "--key", pair.private, "--json")
    assert locked.exit_code == 2 and "NEURONC_SIGNING_KEY_PASSWORD" in as_json(locked)["hint"]
    wrong = cli(runner, "sign", bundle, "--key", pair.private, env={"NEURONC_SIGNING_KEY_PASSWORD": "nope"})
    assert wrong.exit_code == 2
    signed = cli(runner, "sign", bundle, "--key", pair.private, env={"NEURONC_SIGNING_KEY_PASSWORD": "s3cret"})
    assert signed.exit_code == 0, signed.output
    assert cli(runner, "verify", bundle, "--key", pair.public).exit_code == 0


def test_a_damaged_bundle_is_not_signed(runner: CliRunner, bundle: Path, keys: Any) -> None:
    with (bundle / "model" / "config.json").open("a") as f:
        f.write(" ")
    result = cli(runner, "sign", bundle, "--key", keys.private, "--json")
    assert result.exit_code == 4 and as_json(result)["error"] == "signature_invalid"
    assert not (bundle / SIGNATURE_NAME).exists()


# -- requiring a signature --------------------------------------------------------------------


def test_an_unsigned_bundle_is_refused_only_when_a_signature_is_required(
    runner: CliRunner, bundle: Path, keys: Any
) -> None:
    assert cli(runner, "verify", bundle).exit_code == 0
    refused = cli(runner, "verify", bundle, "--signature", "--key", keys.public, "--json")
    assert refused.exit_code == 4
    assert as_json(refused)["error"]["error"] == "signature_missing"
    env = {"NEURONC_REQUIRE_SIGNATURE": "1", "NEURONC_SIGNATURE_KEY": str(keys.public)}
    assert cli(runner, "verify", bundle, env=env).exit_code == 4
    assert cli(runner, "verify", bundle, env={"NEURONC_REQUIRE_SIGNATURE": "0"}).exit_code == 0
    assert cli(runner, "verify", bundle, env={"NEURONC_REQUIRE_SIGNATURE": "maybe"}).exit_code == 2
    # Required, but nothing to trust: exit 2, not a pass.
    no_trust = cli(runner, "verify", bundle, "--signature", "--json")
    assert no_trust.exit_code == 2 and "--key, --certificate" in as_json(no_trust)["message"]
    sign_bundle(bundle, Signer.choose(key=keys.private))
    assert cli(runner, "verify", bundle, env=env).exit_code == 0


def test_another_key_is_refused(runner: CliRunner, tmp_path: Path, bundle: Path, keys: Any) -> None:
    sign_bundle(bundle, Signer.choose(key=keys.private))
    stranger = ec_key(tmp_path / "stranger")
    result = cli(runner, "verify", bundle, "--key", stranger.public, "--json")
    assert result.exit_code == 4
    error = as_json(result)["error"]
    assert error["error"] == "signature_invalid" and "another key" in error["message"]
    with pytest.raises(SignatureError, match="another key"):
        verify_signature(bundle, TrustRoot("key", key=stranger.public))


# -- certificate mode -------------------------------------------------------------------------


def test_certificate_signatures_chain_to_the_trusted_root(runner: CliRunner, tmp_path: Path, bundle: Path) -> None:
    pki = ca_chain(tmp_path / "pki")
    signed = cli(
        runner,
        "sign",
        bundle,
        "--certificate",
        pki.leaf,
        "--key",
        pki.leaf_key,
        "--chain",
        pki.intermediate,
        "--json",
    )
    assert signed.exit_code == 0, signed.output
    assert SIGNER_EMAIL in as_json(signed)["signer"]
    ok = cli(runner, "verify", bundle, "--certificate", pki.root, "--json")
    assert ok.exit_code == 0, ok.output
    assert as_json(ok)["signature"]["method"] == "certificate"
    # The signer's name can be pinned; another name is refused.
    assert cli(runner, "verify", bundle, "--certificate", pki.root, "--identity", SIGNER_EMAIL).exit_code == 0
    other_name = cli(runner, "verify", bundle, "--certificate", pki.root, "--identity", "mallory@example.com")
    assert other_name.exit_code == 4
    # Another organisation's root does not vouch for this signer.
    stranger = ca_chain(tmp_path / "other", name="globex")
    refused = cli(runner, "verify", bundle, "--certificate", stranger.root, "--json")
    assert refused.exit_code == 4 and "does not chain" in as_json(refused)["error"]["message"]
    # A certificate signature checked with a key: a clear refusal, not an AttributeError.
    keyed = cli(runner, "verify", bundle, "--key", ec_key(tmp_path / "k").public, "--json")
    assert keyed.exit_code == 4 and "signed with a certificate" in as_json(keyed)["error"]["message"]
    # model-signing's own command line agrees.
    assert model_signing_verify(bundle, "certificate", "--certificate_chain", str(pki.root)).returncode == 0
    assert model_signing_verify(bundle, "certificate", "--certificate_chain", str(stranger.root)).returncode == 1


def test_certificate_signing_needs_a_matching_key_and_its_chain(
    runner: CliRunner, tmp_path: Path, bundle: Path
) -> None:
    pki = ca_chain(tmp_path / "pki")
    no_chain = cli(runner, "sign", bundle, "--certificate", pki.leaf, "--key", pki.leaf_key)
    assert no_chain.exit_code == 2
    wrong_key = cli(
        runner, "sign", bundle, "--certificate", pki.leaf, "--key", ec_key(tmp_path / "k").private, "--chain", pki.root
    )
    assert wrong_key.exit_code == 2


# -- Sigstore keyless: what can be tested offline ---------------------------------------------


def _offline() -> list[str] | None:
    """A command prefix that runs without network (a new network namespace), or None if none can be made."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True, check=False).returncode == 0:
        return [unshare, "-rn"]
    try:
        socket.getaddrinfo("tuf-repo-cdn.sigstore.dev", 443)
    except OSError:
        return []  # this machine is offline already
    return None


def test_sigstore_signing_unreachable_is_exit_5(tmp_path: Path, bundle: Path) -> None:
    prefix = _offline()
    if prefix is None:
        pytest.skip("Sigstore is reachable and no network namespace can be made to cut it off")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["sign", str(bundle), "--sigstore", "--identity-token", "not.a.token", "--json"]
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "neuronc", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 5, proc.stderr
    error = json.loads(proc.stdout)
    assert error["error"] == "sigstore_unreachable" and "offline, sign with a key" in error["hint"], error
    assert not (bundle / SIGNATURE_NAME).exists()


def test_keyless_signing_without_an_identity_is_exit_2_not_a_wait(
    runner: CliRunner, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token and no ambient CI credential, and no terminal for Sigstore's browser sign-in."""
    for var in ("GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "GOOGLE_SERVICE_ACCOUNT_NAME"):
        monkeypatch.delenv(var, raising=False)
    result = cli(runner, "sign", bundle, "--sigstore", "--json")
    assert result.exit_code == 2, result.output
    assert "OIDC identity" in as_json(result)["message"] and "id-token: write" in as_json(result)["hint"]
    assert not (bundle / SIGNATURE_NAME).exists()


def test_a_sigstore_identity_does_not_accept_a_key_signature(runner: CliRunner, bundle: Path, keys: Any) -> None:
    sign_bundle(bundle, Signer.choose(key=keys.private))
    result = cli(runner, "verify", bundle, "--identity", "ci@example.com", "--issuer", "https://issuer.example")
    assert result.exit_code == 4  # refused from the signature's own material, before any network call
    assert cli(runner, "verify", bundle, "--identity", "ci@example.com").exit_code == 2  # needs --issuer too


def test_sigstore_verification_unreachable_is_exit_5(tmp_path: Path, bundle: Path) -> None:
    """A Sigstore-shaped signature (a certificate in the verification material) checked offline: exit 5."""
    prefix = _offline()
    if prefix is None:
        pytest.skip("Sigstore is reachable and no network namespace can be made to cut it off")
    pki = ca_chain(tmp_path / "pki")
    sign_bundle(bundle, Signer.choose(key=pki.leaf_key, certificate=pki.leaf, chain=[pki.intermediate]))
    # Rewrite the verification material the way a Sigstore bundle carries it (one leaf certificate).
    sig = json.loads((bundle / SIGNATURE_NAME).read_text())
    chain = sig["verificationMaterial"].pop("x509CertificateChain")
    sig["verificationMaterial"]["certificate"] = chain["certificates"][0]
    (bundle / SIGNATURE_NAME).write_text(json.dumps(sig))
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["verify", str(bundle), "--identity", SIGNER_EMAIL, "--issuer", "https://accounts.example.com", "--json"]
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "neuronc", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 5, proc.stderr
    assert json.loads(proc.stdout)["error"]["error"] == "sigstore_unreachable"


# -- the signature travels with the bundle ----------------------------------------------------


def test_copies_and_the_local_store_carry_the_signature(
    runner: CliRunner, tmp_path: Path, bundle: Path, keys: Any
) -> None:
    sign_bundle(bundle, Signer.choose(key=keys.private))
    copy = copy_bundle(bundle, tmp_path / "copy")
    assert (copy / SIGNATURE_NAME).read_bytes() == (bundle / SIGNATURE_NAME).read_bytes()
    assert verify_signature(copy, TrustRoot("key", key=keys.public)).verified
    store = tmp_path / "store"
    published = cli(runner, "store", "publish", bundle, "--store", store, "--json")
    assert published.exit_code == 0, published.output
    stored = Path(as_json(published)["path"])
    assert (stored / SIGNATURE_NAME).is_file()
    key = read_manifest(bundle).config_hash[:12]
    assert cli(runner, "store", "verify", key, "--store", store).exit_code == 0
    fetched = cli(
        runner, "store", "fetch", key, "--store", store, "--out", tmp_path / "out", "--require-signature",
        "--key", keys.public, "--json",
    )  # fmt: skip
    assert fetched.exit_code == 0, fetched.output
    assert as_json(fetched)["signature"]["verified"] is True
    assert (tmp_path / "out" / SIGNATURE_NAME).is_file()


def test_store_publish_sign_signs_then_publishes(runner: CliRunner, tmp_path: Path, bundle: Path, keys: Any) -> None:
    store = tmp_path / "store"
    # Published unsigned first; publishing it again with --sign gives the stored copy its signature.
    assert cli(runner, "store", "publish", bundle, "--store", store).exit_code == 0
    key = read_manifest(bundle).config_hash[:12]
    env = {"NEURONC_REQUIRE_SIGNATURE": "1", "NEURONC_SIGNATURE_KEY": str(keys.public)}
    refused = cli(runner, "store", "fetch", key, "--store", store, "--out", tmp_path / "out", "--json", env=env)
    assert refused.exit_code == 4 and as_json(refused)["error"] == "signature_missing"
    assert not (tmp_path / "out").exists()  # a refused bundle never reaches --out
    env_sign = {"NEURONC_SIGNING_KEY": str(keys.private)}
    signed = cli(runner, "store", "publish", bundle, "--store", store, "--sign", "--json", env=env_sign)
    assert signed.exit_code == 0, signed.output
    assert as_json(signed)["status"] == "exists" and as_json(signed)["signature"]["method"] == "key"
    fetched = cli(runner, "store", "fetch", key, "--store", store, "--out", tmp_path / "out", env=env)
    assert fetched.exit_code == 0, fetched.output


def test_sign_store_option_stores_the_signature_with_the_stored_bundle(
    runner: CliRunner, tmp_path: Path, bundle: Path, keys: Any
) -> None:
    store = open_store(tmp_path / "store")
    stored = store.publish(bundle).path
    result = cli(runner, "sign", bundle, "--key", keys.private, "--store", tmp_path / "store", "--json")
    assert result.exit_code == 0, result.output
    assert as_json(result)["stored"] == str(stored / SIGNATURE_NAME)
    assert verify_signature(stored, TrustRoot("key", key=keys.public)).verified
    elsewhere = cli(runner, "sign", bundle, "--key", keys.private, "--store", tmp_path / "empty", "--json")
    assert elsewhere.exit_code == 2


def test_verify_signature_is_a_full_integrity_check(bundle: Path, keys: Any) -> None:
    """Without verify_bundle, the signature check alone refuses a changed file and an extra one."""
    sign_bundle(bundle, Signer.choose(key=keys.private))
    trust = TrustRoot("key", key=keys.public)
    (bundle / "logs" / "extra.txt").write_text("planted\n")
    with pytest.raises(SignatureError) as extra:
        verify_signature(bundle, trust)
    assert "logs/extra.txt: not signed" in extra.value.details
    (bundle / "logs" / "extra.txt").unlink()
    victim = read_manifest(bundle).files[0].path
    (bundle / victim).write_bytes(b"x" + (bundle / victim).read_bytes()[1:])
    with pytest.raises(SignatureError) as changed:
        verify_signature(bundle, trust)
    assert f"{victim}: content differs from what was signed" in changed.value.details
    (bundle / SIGNATURE_NAME).unlink()
    with pytest.raises(SignatureMissingError):
        verify_signature(bundle, trust)


def test_signing_is_not_loaded_by_light_commands(bundle: Path) -> None:
    """model-signing (about 0.3 s of imports) loads only when a command signs or checks a signature."""
    code = (
        "import sys; from neuronc.cli import main; sys.argv = ['neuronc', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'model_signing', 'sigstore', 'OpenSSL'}))"
    )
    for args in (["--help"], ["inspect", str(bundle)], ["verify", str(bundle)], ["sign", "--help"]):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
        assert proc.stdout.strip().splitlines()[-1] == "[]", (args, proc.stdout[-500:], proc.stderr[-500:])


# -- compile --sign -----------------------------------------------------------------------------


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The compile pipeline's test backend and a tiny model; every real compile is logged."""
    from _pipeline import write_tiny_llama
    from plugins import pipeline_backend

    pipeline_backend.register()
    monkeypatch.setenv(pipeline_backend.COMPILE_LOG_ENV, str(tmp_path / "compiles.log"))
    write_tiny_llama(tmp_path / "model")
    yield tmp_path
    pipeline_backend.unregister()


def test_compile_sign_signs_the_stored_bundle_and_its_out_copy(runner: CliRunner, pipeline: Path, keys: Any) -> None:
    from _pipeline import write_profile

    profile = write_profile(pipeline / "p.yaml")
    store = pipeline / "store"
    # A key that cannot sign fails before anything is compiled.
    bad = cli(runner, "compile", profile, "--store", store, "--sign", "--json", env={"NEURONC_SIGNING_KEY": "nope"})
    assert bad.exit_code == 2, bad.output
    assert as_json(bad)["error"]["error"] == "invalid_input"
    assert not (pipeline / "compiles.log").exists()

    env = {"NEURONC_SIGNING_KEY": str(keys.private)}
    built = cli(runner, "compile", profile, "--store", store, "--out", pipeline / "o", "--sign", "--json", env=env)
    assert built.exit_code == 0, built.output
    data = as_json(built)
    [signature] = data["signatures"]
    bundle = Path(data["builds"][0]["bundle"])
    assert signature["stored"] == str(bundle / SIGNATURE_NAME) and signature["out"] == str(pipeline / "o")
    trust = TrustRoot("key", key=keys.public)
    assert verify_signature(bundle, trust).verified and verify_signature(pipeline / "o", trust).verified
    # A hit carrying the signer's own valid signature keeps it: checked, not signed again.
    signed_before = (bundle / SIGNATURE_NAME).read_bytes()
    again = cli(runner, "compile", profile, "--store", store, "--out", pipeline / "o2", "--sign", "--json", env=env)
    assert again.exit_code == 0, again.output
    [kept] = as_json(again)["signatures"]
    assert as_json(again)["builds"][0]["status"] == "hit" and kept["verified"] is True
    assert (bundle / SIGNATURE_NAME).read_bytes() == signed_before
    assert verify_signature(pipeline / "o2", trust).verified
    # Without --sign the report has no signatures key (its documented shape is unchanged).
    assert "signatures" not in as_json(cli(runner, "compile", profile, "--store", store, "--json"))


def test_compile_sign_never_signs_a_store_hit_it_cannot_prove(runner: CliRunner, pipeline: Path, keys: Any) -> None:
    """Issue 34 (1): a stored bundle changed and re-sealed by someone who can write the store must not
    get the build key's signature; nor does a hit that was never signed (nothing proves it was built here)."""
    from _pipeline import write_profile
    from adversarial._bundles import edit_manifest

    profile = write_profile(pipeline / "p.yaml")
    store = pipeline / "store"
    env = {"NEURONC_SIGNING_KEY": str(keys.private)}
    built = cli(runner, "compile", profile, "--store", store, "--sign", "--json", env=env)
    assert built.exit_code == 0, built.output
    bundle = Path(as_json(built)["builds"][0]["bundle"])
    trust = TrustRoot("key", key=keys.public)
    # The attacker: a value changed, the manifest sealed again, the old signature left (or removed).
    edit_manifest(bundle, lambda m: m["host"].update(hostname="attacker"))
    for tamper in ("re-sealed, old signature", "re-sealed, signature removed"):
        if tamper.endswith("removed"):
            (bundle / SIGNATURE_NAME).unlink()
        before = (bundle / SIGNATURE_NAME).read_bytes() if (bundle / SIGNATURE_NAME).exists() else None
        again = cli(runner, "compile", profile, "--store", store, "--out", pipeline / "o", "--sign", "--json", env=env)
        assert again.exit_code == 4, (tamper, again.output)
        data = as_json(again)
        assert data["builds"][0]["status"] == "hit" and data["signatures"] == []
        assert data["exit_code"] == 4 and data["unsigned"][0].startswith(f"{profile}: it is not signed by this signer")
        after = (bundle / SIGNATURE_NAME).read_bytes() if (bundle / SIGNATURE_NAME).exists() else None
        assert after == before  # nothing signed it
        with pytest.raises(SignatureError):
            verify_signature(bundle, trust)
        with pytest.raises(SignatureError):
            verify_signature(pipeline / "o", trust)


@pytest.mark.s3
def test_compile_sign_into_s3_stores_the_signature_for_other_hosts(
    runner: CliRunner, pipeline: Path, keys: Any, s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _pipeline import write_profile
    from _seaweedfs import use_server_and_make_bucket

    bucket = use_server_and_make_bucket(s3_server, monkeypatch)
    store = f"s3://{bucket}/signed"
    profile = write_profile(pipeline / "p.yaml")
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(pipeline / "ci-cache"))
    built = cli(
        runner, "compile", profile, "--store", store, "--sign", "--json", env={"NEURONC_SIGNING_KEY": str(keys.private)}
    )
    assert built.exit_code == 0, built.output
    assert as_json(built)["signatures"][0]["stored"].startswith(f"{store}/")
    # Another host fetches it with its signature and checks it.
    monkeypatch.setenv("NEURONC_REMOTE_CACHE", str(pipeline / "deploy-cache"))
    key = as_json(built)["builds"][0]["config_hash"][:12]
    env = {"NEURONC_REQUIRE_SIGNATURE": "1", "NEURONC_SIGNATURE_KEY": str(keys.public)}
    fetched = cli(runner, "store", "fetch", key, "--store", store, "--out", pipeline / "b", "--json", env=env)
    assert fetched.exit_code == 0, fetched.output
    assert as_json(fetched)["signature"]["verified"] is True
    assert model_signing_verify(pipeline / "b", "key", "--public_key", str(keys.public)).returncode == 0


# -- without the sign extra -----------------------------------------------------------------------

_BLOCKER = '''
import importlib.abc, sys

class _NoSignExtra(importlib.abc.MetaPathFinder):
    """As if `pip install neuronc` had been run without the sign extra."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"cryptography", "model_signing", "OpenSSL", "sigstore"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoSignExtra())
'''


def test_sign_and_verify_signature_without_the_sign_extra_are_exit_5_with_the_install_hint(
    tmp_path: Path, bundle: Path, keys: Any
) -> None:
    """Issue 34: `sign` and `verify --signature` without the extra end like a missing backend, not a traceback."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER)
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tests)])}
    for args in (
        ["sign", str(bundle), "--key", str(keys.private)],
        ["verify", str(bundle), "--signature", "--key", str(keys.public)],
        ["verify", str(bundle), "--key", str(keys.public)],
        ["deploy", str(bundle), "--for", "vllm", "--require-signature", "--key", str(keys.public)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "neuronc", *args, "--json"], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 5, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        document = json.loads(proc.stdout)
        error = document.get("error", document)
        error = error if isinstance(error, dict) else document
        assert "pip install 'neuronc[sign]'" in error["hint"], (args, document)
    assert not (bundle / SIGNATURE_NAME).exists()


def test_signing_is_a_pipeline_stage_the_reports_carry(pipeline: Path, keys: Any) -> None:
    """Issue 39 item 4: `compile_profiles(signer=...)` signs what the run built, as its last stage; each
    report says what was done (signed, a hit's own signature kept, a hit refused and why), and a signature
    made by another signer is never kept."""
    from _pipeline import write_profile

    from neuronc.pipeline import BuildStatus, compile_profiles
    from neuronc.pipeline.report import SignatureOutcome

    profile = write_profile(pipeline / "p.yaml")
    store = pipeline / "store"
    signer = Signer("key", key=keys.private)
    [built] = compile_profiles([profile], store=store, out_dir=pipeline / "o", signer=signer)
    assert built.status == BuildStatus.BUILT and built.signature is not None
    assert built.signature.outcome == SignatureOutcome.SIGNED and built.signature.error is None
    assert built.signature.record is not None and built.signature.record["out"] == str(pipeline / "o")
    trust = TrustRoot("key", key=keys.public)
    assert (
        verify_signature(Path(str(built.bundle)), trust).verified and verify_signature(pipeline / "o", trust).verified
    )
    built.raise_for_status()
    [hit] = compile_profiles([profile], store=store, signer=signer)
    assert hit.status == BuildStatus.HIT and hit.signature is not None
    assert hit.signature.outcome == SignatureOutcome.KEPT and hit.signature.signer == built.signature.signer
    # Another key's signer cannot prove the hit was built here: it is left unsigned, with why.
    [refused] = compile_profiles(
        [profile], store=store, signer=Signer("key", key=ec_key(pipeline / "other", name="other").private)
    )
    assert refused.signature is not None and refused.signature.outcome == SignatureOutcome.REFUSED
    assert refused.signature.record is None and refused.signature.why.startswith("it is not signed by this signer")
    # Without a signer nothing signs (and the report's JSON is the same either way).
    [plain] = compile_profiles([profile], store=store)
    assert plain.signature is None and "signature" not in plain.to_json()
    # A signer that cannot sign (its key is gone): the failure is recorded on the report and raised again.
    [failed] = compile_profiles([profile], store=store, signer=Signer("key", key=pipeline / "gone-key.pem"))
    assert failed.status == BuildStatus.HIT and failed.signature is not None
    assert failed.signature.outcome == SignatureOutcome.FAILED and failed.signature.error is not None
    with pytest.raises(type(failed.signature.error)):
        failed.raise_for_status()
