"""`neuronc store list|rm|gc|verify|publish|fetch`: a bundle store, local (a directory) or remote (s3://, hf://)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import app, command
from neuronc.cli._options import JsonOpt, StoreOpt
from neuronc.cli._signing import IdentityOpt, IssuerOpt, RequireSignatureOpt, TrustCertOpt, TrustKeyOpt

if TYPE_CHECKING:
    from neuronc.cli._report import JSONObject
    from neuronc.store import BundleStore


class Removed(TypedDict):
    """`store rm --json`: each removed entry (StoreEntry.to_json()) and the bytes freed."""

    removed: list[JSONObject]
    bytes_freed: int


class Repaired(TypedDict):
    """`store verify --repair --json`: what was done to each bundle (Repair.to_json())."""

    store: str
    bundles: list[JSONObject]


class Verified(TypedDict):
    """`store verify --json`: each bundle's entry with its VerifyJSON, and whether all passed."""

    store: str
    ok: bool
    bundles: list[dict[str, object]]


store_app = cli.Group(
    no_args_is_help=True,
    help="List, fetch, publish, verify, remove and clean up bundles in a store.",
)
app.add_command(store_app, name="store")

KeyArg = Annotated[
    str, cli.Argument(help="Config-hash prefix (4+ hex), HASH@TOOLCHAIN prefix, or store-relative path.")
]
AllOpt = Annotated[bool, cli.Option("--all", help="Act on every bundle the key matches.")]


def _open(store: str | None, *, existing: bool = True) -> BundleStore:
    """The store named by --store or NEURONC_STORE (else the default). With ``existing``, a local store
    someone named must exist: a mistyped path is exit 2, not an empty listing (the default store
    may not exist yet: nothing has been compiled into it)."""
    import os

    from neuronc.errors import InvalidInputError
    from neuronc.store import STORE_ENV, LocalStore, open_store

    opened = open_store(store)
    named = bool(store) or bool(os.environ.get(STORE_ENV))
    if existing and named and isinstance(opened, LocalStore) and not opened.root.is_dir():
        what = "--store" if store else STORE_ENV
        msg = f"store {opened.root} does not exist ({what})"
        raise InvalidInputError(msg, hint="check the path; a store directory is made by the first compile into it")
    return opened


def _size(n: int | None) -> str:
    from neuronc.fsutil import format_bytes

    return "-" if n is None else format_bytes(n)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


@command(store_app, name="list", epilog="Example: neuronc store list --json | jq '.bundles[].key'")
def list_command(store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """List complete bundles: key, model, backend, size, age. A missing bucket or repository is exit 5."""
    from neuronc.cli._report import markup_safe

    out.configure(json_mode=json_out)
    s = _open(store)
    rows = [e.to_json() for e in s.list()]

    def render() -> None:
        if not rows:
            out.print(f"no bundles in {markup_safe(s.location)}")
            return
        out.table(
            ["key", "model", "backend", "target", "toolchain", "size", "age"],
            [
                [
                    r["key"],
                    markup_safe(r["model"]),
                    markup_safe(r["backend"]),
                    markup_safe(r["target"]),
                    markup_safe(r["toolchain_label"]),
                    _size(r["size"]),
                    _age(r["age_seconds"]),
                ]
                for r in rows
            ],
            justify={"size": "right", "age": "right"},
        )

    out.result({"store": s.location, "bundles": rows}, render)


@command(
    store_app, name="rm", epilog="Example: neuronc store rm 3f9a2c  (a config-hash prefix; HASH@TOOLCHAIN to pick one)"
)
def rm_command(key: KeyArg, all_matches: AllOpt = False, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Remove bundles from the store."""
    out.configure(json_mode=json_out)
    removed = _open(store).remove(key, all_matches=all_matches)
    data: Removed = {"removed": [e.to_json() for e in removed], "bytes_freed": sum(e.size for e in removed)}

    def render() -> None:
        for e in removed:
            out.print(f"removed {e.key} ({_size(e.size)}) {e.location}")

    out.result(data, render)


@command(store_app, name="gc", epilog="Example: neuronc store gc --json")
def gc_command(store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Remove leftovers of interrupted builds and uploads, incomplete bundles, stale locks, unreferenced objects."""
    out.configure(json_mode=json_out)
    report = _open(store).gc()

    def render() -> None:
        for r in report.removed:
            out.print(f"removed {r.path} ({r.reason}, {_size(r.bytes)})")
        if report.kept_young:
            out.print(f"kept {report.kept_young} unreferenced object(s) younger than the grace period")
        out.print(f"freed {_size(report.bytes_freed)}")

    out.result(report.to_json(), render)


@command(
    store_app,
    name="verify",
    epilog="Example: neuronc store verify 3f9a2c --store s3://bucket/bundles --repair",
)
def verify_command(
    key: KeyArg,
    repair: Annotated[
        bool,
        cli.Option(
            "--repair",
            help="Mend a damaged bundle: upload good copies of its damaged files again (from --from or this "
            "host's cache), or else drop it so the next compile rebuilds it.",
        ),
    ] = False,
    source: Annotated[
        Path | None, cli.Option("--from", help="With --repair: a local copy of the bundle to take good files from.")
    ] = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check every file of the bundles KEY names against their manifest (exit 4 if one is damaged)."""
    from neuronc.cli._report import finish_report
    from neuronc.errors import InvalidInputError, VerificationError

    out.configure(json_mode=json_out)
    if source is not None and not repair:
        raise InvalidInputError("--from applies to --repair", hint="add --repair")
    s = _open(store)
    if repair:
        repairs = s.repair(key, source=source)
        data: Repaired = {"store": s.location, "bundles": [r.to_json() for r in repairs]}

        def render_repairs() -> None:
            for r in repairs:
                out.print(f"{r.entry.key} {r.action}: {r.entry.location}")
                for line in r.problems:
                    out.print(f"  {line}")

        out.result(data, render_repairs)
        return
    checked = s.verify(key)
    bad = [c for c in checked if not c.ok]
    verified: Verified = {
        "store": s.location,
        "ok": not bad,
        "bundles": [{**c.entry.to_json(), **c.report.to_json()} for c in checked],
    }

    def render() -> None:
        for c in checked:
            out.print(f"{c.entry.key} {'ok' if c.ok else 'FAILED'}: {c.report.files_checked} files, {c.entry.location}")
            for line in c.report.problems():
                out.print(f"  {line}")

    error = None
    if bad:
        error = VerificationError(
            f"{s.location}: {len(bad)} bundle(s) failed verification",
            hint=f"`neuronc store verify {key} --store {s.location} --repair` mends or drops them",
        )
    finish_report(verified, render, error)


@command(store_app, name="publish", epilog="Example: neuronc store publish ./bundle --store s3://bucket/bundles")
def publish_command(
    bundle: Annotated[Path, cli.Argument(help="A complete bundle directory.", show_default=False)],
    sign: Annotated[
        bool,
        cli.Option(
            "--sign",
            help="Sign the bundle first (BUNDLE/bundle.sig), with what NEURONC_SIGNING_KEY / _CERT / _SIGSTORE "
            "names; the signature is stored with it.",
        ),
    ] = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Copy a bundle into the store after checking every file (exit 4 if it is damaged), with its signature."""
    from neuronc.cli._signing import render_signature, sign_and_store, signer_from_environment

    out.configure(json_mode=json_out)
    s = _open(store, existing=False)  # publishing makes the store
    signature = sign_and_store(bundle, signer_from_environment(), None) if sign else None
    published = s.publish(bundle)
    data = {**published.to_json(), "signature": signature}

    def render() -> None:
        if signature is not None:
            render_signature(signature, verb="signed")
        word = "published" if not published.lost_race else "already stored"
        out.print(f"{word}: {published.location}")

    out.result(data, render)


@command(
    store_app,
    name="fetch",
    epilog="Example: neuronc store fetch 3f9c2a1b --store s3://bucket/bundles --out bundle --require-signature "
    "--key signing-key.pub",
)
def fetch_command(
    key: KeyArg,
    out_dir: Annotated[
        Path | None,
        cli.Option("--out", "-o", help="Copy the bundle here (replacing a bundle there, never other data)."),
    ] = None,
    require_signature: RequireSignatureOpt = False,
    trust_key: TrustKeyOpt = None,
    certificate: TrustCertOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Get the bundle KEY names from the store, every file verified (a remote store's lands in its local cache)."""
    from neuronc.bundle import read_manifest
    from neuronc.bundle.signature import read_signature
    from neuronc.cli._signing import check_signature, render_signature, trust_for

    out.configure(json_mode=json_out)
    trust = trust_for(flag=require_signature, key=trust_key, certificates=certificate, identity=identity, issuer=issuer)
    s = _open(store)
    bundle = s.fetch(key)
    signed = check_signature(bundle, trust)  # before the copy: a refused bundle never reaches --out
    placed = None
    if out_dir is not None:
        from neuronc.pipeline.out import place_bundle

        placed = place_bundle(bundle, out_dir, signature_checked=True)  # checked above when required
    manifest = read_manifest(placed or bundle)
    data = {
        "store": s.location,
        "config_hash": manifest.config_hash,
        "toolchain_key": manifest.toolchain_key,
        "bundle": str(bundle),
        "out": str(placed) if placed else None,
        "signed": read_signature(placed or bundle) is not None,
        "signature": signed.to_json() if signed else None,
    }

    def render() -> None:
        if signed is not None:
            render_signature(signed.to_json(), verb="verified, signed")
        out.print(f"fetched {manifest.config_hash[:12]}: {placed or bundle}")

    out.result(data, render)
