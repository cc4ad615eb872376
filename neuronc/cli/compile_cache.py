"""`neuronc cache status|cleanup|synchronize`: the local Neuron compile cache, and publishing into a Hub cache."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt
from neuronc.cli.cache import cache_app
from neuronc.errors import InvalidInputError, RemoteStoreError, printable
from neuronc.fsutil import format_bytes, plural

if TYPE_CHECKING:
    from neuronc.compile_cache import CacheStatus

CacheDirOpt = Annotated[
    Path | None,
    cli.Option(
        "--cache-dir",
        metavar="DIR",
        help="The local compile cache. Default: $NEURON_COMPILE_CACHE_URL, then /var/tmp/neuron-compile-cache.",
    ),
]


def _status(cache_dir: Path | None) -> CacheStatus:
    from neuronc.compile_cache import cache_status, resolve_cache_dir

    root, source = resolve_cache_dir(cache_dir)
    return cache_status(root, source)


@command(cache_app, name="status", epilog="Example: neuronc cache status --json | jq .counts")
def cache_status_command(cache_dir: CacheDirOpt = None, json_out: JsonOpt = False) -> None:
    """The local Neuron compile cache: entries by state (complete, failed, locked, empty), disk use per compiler."""
    out.configure(json_mode=json_out)
    status = _status(cache_dir)

    def render() -> None:
        out.code(f"Compile cache {printable(str(status.root))} ({status.source})")
        if not status.root.is_dir():
            out.print("  (does not exist)")
            return
        rows = []
        for usage in status.versions:
            counts = usage.counts
            current = {True: "yes", False: "no", None: "?"}[usage.current]
            states = [counts["complete"], counts["failed"], counts["locked"], counts["empty"]]
            rows.append([printable(usage.folder), *states, format_bytes(usage.bytes), current])
        numbers = ("complete", "failed", "locked", "empty", "disk")
        out.table(
            ["compiler", *numbers, "installed"], rows, justify=dict.fromkeys(numbers, "right"), optional=["installed"]
        )
        if status.stale_locks:
            out.print(f"{plural(status.stale_locks, 'stale lock')} (no process holds it): neuronc cache cleanup")
        failed = status.to_json()["counts"]["failed"]
        if failed:
            out.print(f"{plural(failed, 'failed entry', 'failed entries')}: later compiles of those graphs fail")
        for path, why in status.unreadable:
            out.warning(f"{printable(path)}: {why} (not counted)")

    out.result(status.to_json(), render)


@command(
    cache_app,
    name="cleanup",
    epilog="Example: neuronc cache cleanup --dry-run (failed entries and stale locks by default)",
)
def cache_cleanup_command(
    cache_dir: CacheDirOpt = None,
    failed: Annotated[bool, cli.Option("--failed", help="Remove failed (poisoned) entries.")] = False,
    stale_locks: Annotated[bool, cli.Option("--stale-locks", help="Remove lock files no process holds.")] = False,
    old_versions: Annotated[
        bool, cli.Option("--old-versions", help="Remove the folders of compilers other than the installed one.")
    ] = False,
    empty: Annotated[bool, cli.Option("--empty", help="Remove entries with no result, no log and no lock.")] = False,
    dry_run: Annotated[bool, cli.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Remove failed entries and stale locks (both, when no kind is named); never a complete entry unless asked."""
    from neuronc.compile_cache import apply_cleanup, plan_cleanup

    out.configure(json_mode=json_out)
    if not (failed or stale_locks or old_versions or empty):
        failed = stale_locks = True
    status = _status(cache_dir)
    plan = plan_cleanup(status, failed=failed, stale_locks=stale_locks, old_versions=old_versions, empty=empty)
    removals = plan.removals
    problems = [] if dry_run else apply_cleanup(removals)
    freed = sum(r.bytes for r in removals)
    skipped = [*plan.skipped, *((path, f"{why}: not looked at") for path, why in status.unreadable)]
    data = {
        "cache_dir": str(status.root),
        "dry_run": dry_run,
        "removed": [r.to_json() for r in removals],
        "bytes": freed,
        "problems": problems,
        "skipped": [{"path": path, "reason": why} for path, why in skipped],
    }

    def render() -> None:
        verb = "would remove" if dry_run else "removed"
        for removal in removals:
            out.code(f"{verb} {removal.reason}: {printable(str(removal.path))}")
        out.print(f"{verb} {plural(len(removals), 'item')}, {format_bytes(freed)}")
        for path, why in skipped:
            out.warning(f"kept {printable(path)}: {why}")
        for problem in problems:
            out.warning(problem)

    out.result(data, render)
    if problems:
        raise cli.Exit(1)


@command(
    cache_app,
    name="synchronize",
    epilog="Examples: neuronc cache synchronize BUNDLE --to ./neuron-cache ; "
    "neuronc cache synchronize BUNDLE... --repo my-org/optimum-neuron-cache",
)
def cache_synchronize_command(
    bundles: Annotated[list[Path], cli.Argument(help="optimum-neuron bundle directories.")],
    repo: Annotated[
        str | None,
        cli.Option(
            "--repo",
            metavar="ORG/NAME",
            help="Upload to this cache repository (one commit). Default: $CUSTOM_CACHE_REPO, then the one "
            "`optimum-cli neuron cache set` recorded ($HF_HOME/optimum_neuron_custom_cache).",
        ),
    ] = None,
    to: Annotated[
        Path | None, cli.Option("--to", metavar="DIR", help="Write the same tree into DIR instead of uploading.")
    ] = None,
    model_id: Annotated[
        str | None,
        cli.Option("--model-id", metavar="ORG/NAME", help="The Hub id to file a bundle of a local model under."),
    ] = None,
    cache_dir: CacheDirOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Publish bundles' compiled graphs in optimum-neuron 0.4.5's cache layout (MODULE_* + 0_REGISTRY entry)."""
    from neuronc.hubcache.layout import hub_id_problem
    from neuronc.hubcache.publish import collect, upload
    from neuronc.hubcache.publish_tree import write_tree
    from neuronc.hubcache.sources import DEFAULT_CACHE_REPO, resolve_cache_repo
    from neuronc.model.hfcache import hub_offline

    out.configure(json_mode=json_out)
    if to is not None and repo is not None:
        raise InvalidInputError("--to and --repo are exclusive", hint="--to writes a directory, --repo uploads")
    if model_id is not None and (problem := hub_id_problem(model_id, "--model-id")) is not None:
        raise InvalidInputError(problem, hint="the Hub id the model comes from, such as my-org/Llama-3.1-8B")
    publications = [collect(b, cache_dir=cache_dir, model_id=model_id) for b in bundles]
    ok = any(p.publishable for p in publications)
    data: dict[str, object] = {"ok": ok, "bundles": [p.to_json() for p in publications]}
    if to is not None:
        written = write_tree(publications, to)
        data.update({"to": str(to), "files": written})
    else:
        repo_id, why = resolve_cache_repo(repo)
        if repo_id == DEFAULT_CACHE_REPO and why == "default":
            raise InvalidInputError(
                f"no cache repository to write: {DEFAULT_CACHE_REPO} is AWS's public cache",
                hint="pass --repo ORG/NAME, set CUSTOM_CACHE_REPO, or `optimum-cli neuron cache set ORG/NAME`",
            )
        if ok and hub_offline():
            raise RemoteStoreError(
                "HF_HUB_OFFLINE is set: uploading to a Hub cache repository needs the Hub",
                hint="unset HF_HUB_OFFLINE, or write the tree into a directory with --to DIR",
            )
        data.update({"repo": repo_id, "repo_from": why, "upload": upload(publications, repo_id)})

    def render() -> None:
        for pub in publications:
            if pub.publishable:
                out.code(f"published {printable(pub.bundle)}: {pub.registry_path}")
            for reason in pub.skipped:
                out.warning(f"{printable(pub.bundle)}: not published: {reason}")
        if to is not None:
            out.code(f"Use it with: neuronc cache-lookup MODEL --snapshot {printable(str(to))}")

    out.result(data, render)
    if not ok:
        raise cli.Exit(2)
