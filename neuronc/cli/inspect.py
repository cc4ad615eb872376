"""`neuronc inspect BUNDLE` (what a bundle is) and `neuronc verify BUNDLE` (the strict CI check).

Neither imports torch or transformers, follows a symlink inside a bundle, or unpickles anything:
a bundle is untrusted data (tests/test_inspect_hostile.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._inspect_bench import BenchStoreOpt, render_stored_runs, stored_runs
from neuronc.cli._inspect_report import Checks, EnvironmentJSON, Skipped, VerifyCheck, VerifyDocument
from neuronc.cli._options import JsonOpt, WideOpt
from neuronc.cli._report import finish_report as _finish
from neuronc.cli._report import markup_safe as _s
from neuronc.cli._report import table_cell as _cell
from neuronc.cli._signing import (
    IdentityOpt,
    IssuerOpt,
    SignatureFlag,
    StagingOpt,
    TrustCertOpt,
    TrustKeyOpt,
    trust_for,
)
from neuronc.errors import EnvironmentIncompatibleError, InvalidInputError, NeuroncError

if TYPE_CHECKING:
    from neuronc.accuracy import AccuracyJSON
    from neuronc.benchmark.results import StoredRunJSON
    from neuronc.bundle import Manifest
    from neuronc.bundle.signing import SignatureJSON
    from neuronc.bundle.signing_material import TrustRoot
    from neuronc.bundle.summary import BundleSummary
    from neuronc.verdict import VerdictJSON

BundleArg = Annotated[Path, cli.Argument(help="Bundle directory.", show_default=False)]
BundleOrUrlArg = Annotated[
    str,
    cli.Argument(help="Bundle directory, or a bundle's URL in a remote store (s3://, hf://).", show_default=False),
]
JobsOpt = Annotated[
    int | None, cli.Option("--jobs", "-j", min=1, max=256, help="Files hashed in parallel (default: CPU count).")
]
AgainstEnvOpt = Annotated[
    bool,
    cli.Option(
        "--against-env", help="Compare the bundle's toolchain with what is installed here (exit 5 if incompatible)."
    ),
]
AgainstImageOpt = Annotated[
    str | None,
    cli.Option(
        "--against-image",
        help="Will the bundle start with zero compiles in this image? Compare every part of its serving-stack "
        "key with the image's: yes (exit 0), no (exit 5, each difference named) or cannot tell (exit 7, each "
        "unchecked part named with how to check it). A Deep Learning Container of the support matrix is known; "
        "another image is read through docker/podman (pulled only with NEURONC_PULL_IMAGES=1).",
    ),
]

Report = TypeVar("Report")  # an extra check's report (a TypedDict of the library's)


@command(name="inspect", epilog="Example: neuronc inspect ./bundle --verify --against-env --json")
def inspect_command(
    bundle: BundleArg,
    verify: Annotated[bool, cli.Option("--verify", help="Recompute every hash (exit 4 on any problem).")] = False,
    against_env: AgainstEnvOpt = False,
    jobs: JobsOpt = None,
    store: BenchStoreOpt = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Show a bundle: model, shapes, graphs, shards, toolchain, keys and totals, and its stored bench results."""
    from neuronc.bundle import read_manifest
    from neuronc.bundle.summary import bundle_summary

    out.configure(json_mode=json_out, wide=wide)
    manifest = read_manifest(bundle)
    summary = bundle_summary(manifest, bundle)
    if summary["load_snippet"] is None:
        summary["load_snippet"] = _backend_snippet(manifest, bundle)
    checks: Checks = {}
    failure = _run_checks(bundle, manifest, checks, verify=verify, against_env=against_env, jobs=jobs)
    runs = stored_runs(bundle, manifest, store)
    shown = {**summary, **checks, **({"bench": runs} if runs is not None else {})}
    _finish(shown, lambda: _render(summary, checks, runs), failure)


def _backend_snippet(manifest: Manifest, bundle: Path) -> str | None:
    """How to load the bundle, from its backend when the manifest records none (CPU bundles)."""
    from neuronc.backends import backend_for_manifest, is_registered

    if not is_registered(manifest.backend):
        return None
    return backend_for_manifest(manifest).runtime.load_snippet(str(bundle.absolute()))


@command(name="verify", epilog="Example: neuronc verify ./bundle --json   # exit 0 only if every file checks out")
def verify_command(
    bundle_arg: BundleOrUrlArg,
    against_env: AgainstEnvOpt = False,
    against_image: AgainstImageOpt = None,
    accuracy: Annotated[
        bool,
        cli.Option(
            "--accuracy",
            help="Also run the bundle and the Hugging Face eager model on the same prompts and compare tokens "
            "and per-step logits (exit 4 on divergence). Needs the bundle's runtime (the cpu extra for inductor).",
        ),
    ] = False,
    prompts: Annotated[
        Path | None,
        cli.Option("--prompts", help="Prompts for --accuracy: a text file, one prompt per line."),
    ] = None,
    tol: Annotated[
        float | None,
        cli.Option("--tol", min=0.0, help="Max |Δlogit| allowed by --accuracy (default 1e-3 fp32, 0.1 bf16)."),
    ] = None,
    signature: SignatureFlag = False,
    key: TrustKeyOpt = None,
    certificate: TrustCertOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    staging: StagingOpt = False,
    jobs: JobsOpt = None,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Check a bundle for CI: manifest safe, every file present and its SHA-256 right, nothing extra;
    with --signature, also signed by whom you trust."""
    from neuronc.bundle import read_manifest
    from neuronc.store import is_remote

    out.configure(json_mode=json_out, wide=wide)
    if (prompts is not None or tol is not None) and not accuracy:
        raise InvalidInputError("--prompts and --tol apply to --accuracy", hint="add --accuracy")
    trust = trust_for(
        flag=signature, key=key, certificates=certificate, identity=identity, issuer=issuer, staging=staging
    )
    signature_check = None if trust is None else _signature_check(trust)
    verdict_check = None if against_image is None else _verdict_check(against_image)
    shown = bundle_arg
    if is_remote(bundle_arg):
        if trust is None and against_image is None:
            _verify_remote(bundle_arg, against_env=against_env, accuracy=accuracy, jobs=jobs)
            return
        bundle = _fetch_url(bundle_arg, accuracy=accuracy)  # the signature is checked on a verified local copy
    else:
        bundle = Path(bundle_arg)
    manifest = read_manifest(bundle)
    data: VerifyDocument = {"bundle": shown, "config_hash": manifest.config_hash, "ok": False}
    accuracy_check = _accuracy_check(prompts, tol) if accuracy else None  # reads the prompts now: exit 2 if bad
    failure = _run_checks(
        bundle,
        manifest,
        data,
        verify=True,
        against_env=against_env,
        jobs=jobs,
        signature=signature_check,
        verdict=verdict_check,
        accuracy=accuracy_check,
    )
    data["ok"] = failure is None
    _finish(data, lambda: _render_verify(data), failure)


def _signature_check(trust: TrustRoot) -> VerifyCheck[SignatureJSON]:
    """The bundle signed by whom ``trust`` names (verify_signature raises a NeuroncError if not)."""
    from neuronc.bundle.signing import verify_signature

    return lambda bundle, _manifest: (verify_signature(bundle, trust).to_json(), None)


def _verdict_check(reference: str) -> VerifyCheck[VerdictJSON]:
    return lambda bundle, _manifest: _image_verdict(bundle, reference)


def _image_verdict(bundle: Path, reference: str) -> tuple[VerdictJSON, NeuroncError | None]:
    """The pre-boot verdict against an image (neuronc.verdict); exit 5 naming every differing part."""
    from neuronc.verdict import image_verdict

    verdict = image_verdict(bundle, reference)
    return verdict.to_json(), verdict.failure(str(bundle))


def _accuracy_check(prompts: Path | None, tol: float | None) -> VerifyCheck[AccuracyJSON]:
    """neuronc.accuracy's check, its report kept when it fails (AccuracyError carries it)."""
    from neuronc.accuracy import AccuracyError, accuracy_check

    check = accuracy_check(prompts, tol)

    def run(bundle: Path, manifest: Manifest) -> tuple[AccuracyJSON, NeuroncError | None]:
        try:
            return check(bundle, manifest), None
        except AccuracyError as exc:
            return exc.report, exc

    return run


def _fetch_url(url: str, *, accuracy: bool) -> Path:
    """A remote bundle downloaded (every object verified as it streams) into the store's local cache."""
    from neuronc.store import RemoteStore, split_bundle_url

    if accuracy:
        raise InvalidInputError("--accuracy runs a local bundle", hint="fetch it first (neuronc store fetch)")
    store_url, rel = split_bundle_url(url)
    return RemoteStore(store_url).fetch(rel)


def _verify_remote(url: str, *, against_env: bool, accuracy: bool, jobs: int | None) -> None:
    """`neuronc verify s3://.../<bundle>`: hash every stored object as it streams (nothing is kept)."""
    from neuronc.store import split_bundle_url, verify_url

    if accuracy:
        raise InvalidInputError("--accuracy runs a local bundle", hint="fetch it first (neuronc compile --out)")
    checked = verify_url(url, jobs=jobs)
    manifest = checked.entry.manifest
    data: VerifyDocument = {"bundle": url, "config_hash": manifest.config_hash, "verify": checked.report.to_json()}
    failure: NeuroncError | None = None
    try:
        checked.report.raise_for_problems()
    except NeuroncError as exc:
        store = split_bundle_url(url)[0]
        exc.hint = f"`neuronc store verify {manifest.config_hash[:12]} --store {store} --repair` mends or drops it"
        failure = exc
    if against_env:
        failure = failure or _environment_failure(url, manifest, data)
    data["ok"] = failure is None
    _finish(data, lambda: _render_verify(data), failure)


def _run_checks(
    bundle: Path,
    manifest: Manifest,
    data: Checks,
    *,
    verify: bool,
    against_env: bool,
    jobs: int | None,
    signature: VerifyCheck[SignatureJSON] | None = None,
    verdict: VerifyCheck[VerdictJSON] | None = None,
    accuracy: VerifyCheck[AccuracyJSON] | None = None,
) -> NeuroncError | None:
    """Run the requested checks into ``data``; return the first failure (integrity before environment)."""
    from neuronc.bundle import verify_bundle

    failures: list[NeuroncError] = []
    if verify:
        with out.progress() as progress:
            report = verify_bundle(bundle, jobs=jobs, manifest=manifest, progress=progress)
        data["verify"] = report.to_json()
        try:
            report.raise_for_problems()
        except NeuroncError as exc:
            failures.append(exc)
    if against_env:
        incompatible = _environment_failure(str(bundle), manifest, data)
        if incompatible is not None:
            failures.append(incompatible)
        from neuronc.verdict import has_verdict, host_verdict

        if has_verdict(manifest):
            host = host_verdict(bundle)
            data["verdict"] = host.to_json()
            if (unstarted := host.failure(str(bundle))) is not None:
                failures.append(unstarted)

    def extra(check: VerifyCheck[Report] | None) -> Report | Skipped | None:
        """An extra check's report (None when not asked for, or when it failed with none); its
        failure added to ``failures``."""
        if check is None:
            return None
        if failures:  # running a model from a damaged or incompatible bundle proves nothing
            return {"skipped": "an earlier check failed"}
        try:
            report, failure = check(bundle, manifest)
        except NeuroncError as exc:
            failures.append(exc)
            return None
        if failure is not None:
            failures.append(failure)
        return report

    # The extra checks, in this order, each reported under its name.
    if (signed := extra(signature)) is not None:
        data["signature"] = signed
    if (verdict_report := extra(verdict)) is not None:
        data["verdict"] = verdict_report
    if (accurate := extra(accuracy)) is not None:
        data["accuracy"] = accurate
    return failures[0] if failures else None


def _environment_failure(bundle: str, manifest: Manifest, data: Checks) -> NeuroncError | None:
    """Compare the bundle's toolchain with this environment into ``data``; the error if incompatible."""
    from neuronc.bundle import INCOMPATIBLE

    comparison = environment_comparison(manifest)
    data["environment"] = comparison
    if comparison["verdict"] != INCOMPATIBLE:
        return None
    details = [
        f"{_cell(d['package'])}: bundle {_cell(d['bundle'])}, installed {_cell(d['installed'])} ({_cell(d['reason'])})"
        for d in comparison["differences"]
        if d["verdict"] == INCOMPATIBLE
    ]
    msg = f"{bundle}: built with a toolchain incompatible with this environment"
    return EnvironmentIncompatibleError(msg, details=details, hint=comparison.get("hint"))


def environment_comparison(manifest: Manifest) -> EnvironmentJSON:
    """compare_toolchain against the installed versions of the bundle's backend, as JSON."""
    from neuronc.backends import backend_for_manifest
    from neuronc.bundle import INCOMPATIBLE, compare_toolchain, safe_text

    try:
        installed = backend_for_manifest(manifest).toolchain.toolchain_versions()
    except (NeuroncError, ImportError) as exc:
        reason = exc.message if isinstance(exc, NeuroncError) else str(exc)
        return {
            "verdict": INCOMPATIBLE,
            "bundle_toolchain_key": manifest.toolchain_key,
            "installed_toolchain_key": None,
            "differences": [
                {
                    "package": safe_text(manifest.backend),
                    "bundle": "backend",
                    "installed": None,
                    "verdict": INCOMPATIBLE,
                    "reason": f"backend not available here: {safe_text(reason)}",
                }
            ],
            "hint": "install the backend the bundle was built with (see `neuronc backends`)",
        }
    comparison = compare_toolchain(manifest, installed).to_json()
    result: EnvironmentJSON = {
        "verdict": comparison["verdict"],
        "bundle_toolchain_key": comparison["bundle_toolchain_key"],
        "installed_toolchain_key": comparison["installed_toolchain_key"],
        "differences": comparison["differences"],
        "neuron_sdk": _releases_of(manifest.toolchain, installed),
    }
    if result["verdict"] == INCOMPATIBLE:
        result["hint"] = "rebuild the bundle here, or install the versions it was built with"
    return result


def _releases_of(
    bundle: Mapping[str, str | None] | None, installed: Mapping[str, str | None] | None
) -> dict[str, str | None]:
    """The Neuron SDK releases (the support matrix) the bundle's and the installed versions are."""
    from neuronc.backends.support import detect_release

    found = {"bundle": detect_release(dict(bundle or {})), "installed": detect_release(dict(installed or {}))}
    return {side: release.version if release is not None else None for side, release in found.items()}


# -- rendering ------------------------------------------------------------------------------------


def _size(n: int | None) -> str:
    from neuronc.fsutil import format_bytes

    return "-" if n is None else format_bytes(n)


def _render(d: BundleSummary, checks: Checks, runs: list[StoredRunJSON] | None = None) -> None:
    from neuronc.fsutil import plural

    seq = d["sequence"]
    model = d["model"]
    revision = f" @ {_s(model['revision'], 64)}" if model["revision"] else ""
    out.print(f"bundle     {_s(d['bundle'])}")
    out.print(f"model      {_s(model['id'])}{revision}")
    out.print(f"backend    {_s(d['backend'])}    target {_s(d['target'])}    tp {_s(d['tp_degree'])}")
    out.print(f"batch      {_s(d['batch_size'])}    dtype {_s(d['dtype'])}    weights {_s(d['weights_mode'])}")
    out.print(f"sequence   max {_s(seq['max_length'])}    max context {_s(seq['max_context_length'])}")
    out.print(f"buckets    context {_s(seq['context_buckets'])}    token {_s(seq['token_buckets'])}")
    out.print(
        f"created    {_s(d['created_at'])} on {_s(d['host'].get('hostname'))} by neuronc {_s(d['neuronc_version'])}"
    )
    if d["graphs"]:
        rows = [
            [
                _cell(g["name"]),
                _cell(g["role"]),
                g["batch"],
                g["bucket"],
                _size(g["bytes"]),
                f"{g['compile_seconds']:.1f}",
                "hit" if g["cache_hit"] else "",
                _cell(g["artifact"]),
            ]
            for g in d["graphs"]
        ]
        out.table(
            ["graph", "role", "batch", "bucket", "size", "compile s", "cache", "artifact"],
            rows,
            title="graphs",
            justify={"batch": "right", "bucket": "right", "size": "right", "compile s": "right"},
            optional=["role", "size", "compile s", "cache", "artifact"],
        )
    if d["shards"]:
        rows = [[s["rank"], _cell(s["file"]), _size(s["bytes"]), s["sha256"][:16]] for s in d["shards"]]
        out.table(["rank", "file", "size", "sha256"], rows, title="shards", justify={"size": "right"})
    out.table(
        ["package", "version"],
        [[_cell(k), _cell(v) if v else "-"] for k, v in d["toolchain"].items()],
        title="toolchain",
    )
    keys = d["keys"]
    out.print(f"config     {keys['config_hash']}")
    out.print(f"toolchain  {keys['toolchain_key']}")
    t = d["totals"]
    out.print(
        f"totals     {plural(t['files'], 'file')}, {_size(t['bytes'])}; {plural(t['graphs'], 'graph')}, "
        f"{plural(t['shards'], 'shard')}; "
        f"compile {t['compile_seconds']:.1f} s, wall {t['wall_seconds']:.1f} s"
    )
    if d["load_snippet"]:
        out.print("load:")
        # Lines to copy as they are, but never a control character from the manifest to the terminal.
        out.code("\n".join(f"  {_cell(line, 1000)}" for line in str(d["load_snippet"]).splitlines()[:40]))
    if "verify" in checks:
        _render_verify(checks, environment=False)
    if "environment" in checks:
        _render_environment(checks["environment"])
    render_stored_runs(runs)


def _render_verify(d: Checks, *, environment: bool = True) -> None:
    if "verify" in d:
        v = d["verify"]
        rate = v["bytes_hashed"] / v["seconds"] / 1e6 if v["seconds"] else 0.0
        status = "ok" if v["ok"] else "FAILED"
        out.print(
            f"verify     {status}: {v['files_checked']} files, {_size(v['bytes_hashed'])} in {v['seconds']:.2f} s "
            f"({rate:.0f} MB/s, {v['jobs']} jobs)"
        )
    if "environment" in d and environment:
        _render_environment(d["environment"])
    verdict = d.get("verdict")
    if verdict is not None and "parts" in verdict:
        render_verdict(verdict)
    signature = d.get("signature")
    if signature is not None and "signer" in signature:
        from neuronc.cli._signing import render_signature

        render_signature(signature, verb="ok, signed")
    elif signature is not None and "skipped" in signature:
        out.print(f"signature  skipped: {signature['skipped']}")
    accuracy = d.get("accuracy")
    if accuracy is not None and "prompts" in accuracy:
        status = "ok" if accuracy["passed"] else "FAILED"
        out.print(
            f"accuracy   {status}: {len(accuracy['prompts'])} prompt(s), {accuracy['max_new_tokens']} tokens each, "
            f"max |Δlogit| {accuracy['max_abs_diff']:.2e} (tol {accuracy['tol']:.0e}, {accuracy['dtype']})"
        )
    elif accuracy is not None and "skipped" in accuracy:
        out.print(f"accuracy   skipped: {accuracy['skipped']}")


def render_verdict(verdict: VerdictJSON) -> None:
    """Every key part (same, differs, unchecked: why and how, pinned: by what), the warnings, then the
    answer: starts with zero compiles: yes / no / cannot tell."""
    out.print(f"verdict    against {_s(verdict['image'])} ({_s(verdict['source'])})")
    for part in verdict["parts"]:
        note = f" ({_s(part['note'], 400)})" if part["note"] and part["status"] != "same" else ""
        out.print(
            f"  {_s(part['field'])}: bundle {_s(part['bundle'])}, image {_s(part['image'])} - {part['status']}{note}"
        )
    for warning in verdict["warnings"]:
        out.print(f"  warning: {_s(warning, 400)}")
    out.print(f"starts with zero compiles: {verdict['answer']}")


def _render_environment(env: EnvironmentJSON) -> None:
    out.print(f"toolchain  {env['verdict']} with this environment")
    sdk = env.get("neuron_sdk") or {}
    if sdk.get("bundle") or sdk.get("installed"):
        unknown = "no release neuronc knows"
        out.print(f"  Neuron SDK: bundle {sdk.get('bundle') or unknown}, installed {sdk.get('installed') or unknown}")
    for diff in env["differences"]:
        out.print(
            f"  {_s(diff['package'])}: bundle {_s(diff['bundle'])}, installed {_s(diff['installed'])} "
            f"- {diff['verdict']}: {_s(diff['reason'])}"
        )


__all__ = ["VerifyCheck", "environment_comparison", "inspect_command", "render_verdict", "verify_command"]
