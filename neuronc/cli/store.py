"""`neuronc store list|rm|gc`: the local bundle store."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from neuronc._output import out
from neuronc.cli._app import app, command
from neuronc.cli._options import JsonOpt, StoreOpt

store_app = typer.Typer(no_args_is_help=True, help="List, remove and clean up bundles in the local store.")
app.add_typer(store_app, name="store")


def _size(n: int) -> str:
    from neuronc.cli.inspect import _size as size

    return size(n)


def _open(store: str | None) -> Any:
    """A local Store, or a remote one (s3://, hf://) through neuronc.remote_store."""
    from neuronc.remote_store import open_store

    return open_store(store)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


@command(store_app, name="list", epilog="Example: neuronc store list --json | jq '.bundles[].key'")
def list_command(store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """List complete bundles: key, model, backend, size, age."""
    from neuronc.cli.inspect import _s

    out.configure(json_mode=json_out)
    s = _open(store)
    rows = [e.to_json() for e in s.list()]

    def render() -> None:
        if not rows:
            out.print(f"no bundles in {_s(s.root)}")
            return
        out.table(
            ["key", "model", "backend", "target", "toolchain", "size", "age"],
            [
                [
                    r["key"],
                    _s(r["model"]),
                    _s(r["backend"]),
                    _s(r["target"]),
                    _s(r["toolchain_label"]),
                    _size(r["size"]),
                    _age(r["age_seconds"]),
                ]
                for r in rows
            ],
            justify={"size": "right", "age": "right"},
        )

    out.result({"store": str(s.root), "bundles": rows}, render)


@command(
    store_app, name="rm", epilog="Example: neuronc store rm 3f9a2c  (a config-hash prefix; HASH@TOOLCHAIN to pick one)"
)
def rm_command(
    key: Annotated[
        str, typer.Argument(help="Config-hash prefix (4+ hex), HASH@TOOLCHAIN prefix, or store-relative path.")
    ],
    all_matches: Annotated[bool, typer.Option("--all", help="Remove every bundle the key matches.")] = False,
    store: StoreOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove bundles from the store."""
    from neuronc.errors import InvalidInputError
    from neuronc.store import Store

    out.configure(json_mode=json_out)
    s = _open(store)
    if isinstance(s, Store):
        removed = s.remove(key, all_matches=all_matches)
    else:
        matches = s.find(key)
        if len(matches) > 1 and not all_matches:
            msg = f"'{key}' matches {len(matches)} bundles"
            raise InvalidInputError(msg, details=[str(e.path) for e in matches], hint="give a longer prefix, or --all")
        removed = s.remove(key)
    data: dict[str, Any] = {"removed": [e.to_json() for e in removed], "bytes_freed": sum(e.size for e in removed)}

    def render() -> None:
        for e in removed:
            out.print(f"removed {e.key} ({_size(e.size)}) {e.path}")

    out.result(data, render)


@command(store_app, name="gc", epilog="Example: neuronc store gc --json")
def gc_command(store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Remove staging leftovers of interrupted builds, incomplete bundles and stale locks."""
    out.configure(json_mode=json_out)
    report = _open(store).gc()
    data = report.to_json()

    def render() -> None:
        for r in data["removed"]:
            out.print(f"removed {r.get('path')} ({r.get('reason', 'unreferenced')}, {_size(int(r.get('bytes') or 0))})")
        out.print(f"freed {_size(report.bytes_freed)}")

    out.result(data, render)
