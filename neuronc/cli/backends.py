"""`neuronc backends`: every registered backend, whether it runs here, and how to install it."""

from __future__ import annotations

from neuronc._output import out
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt, WideOpt


@command(name="backends")
def backends_command(json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """List backends: available or not, versions, and the install hint when not."""
    from neuronc.backends import backend_names, entry_point_value, get_backend

    out.configure(json_mode=json_out, wide=wide)
    rows = []
    for name in backend_names():
        backend = get_backend(name)
        availability = backend.availability()
        rows.append(
            {
                "name": name,
                "entry_point": entry_point_value(name),
                "description": backend.description,
                "available": availability.available,
                "targets": sorted(backend.targets),
                "amp": sorted(backend.amp),
                "versions": availability.versions,
                "reason": availability.reason,
                "install_hint": availability.install_hint,
            }
        )

    def render() -> None:
        table_rows = []
        for row in rows:
            versions = row["versions"]
            assert isinstance(versions, dict)
            shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "neuronc")
            status = "available" if row["available"] else f"unavailable: {row['reason']}"
            table_rows.append([row["name"], ", ".join(row["targets"]), status, shown])  # type: ignore[arg-type]
        out.table(["backend", "targets", "status", "versions"], table_rows)
        for row in rows:
            if not row["available"] and row["install_hint"]:
                out.print(f"{row['name']}: {row['install_hint']}")

    out.result({"backends": rows}, render)
