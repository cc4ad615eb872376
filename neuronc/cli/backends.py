"""`neuronc backends`: every registered backend, whether it runs here, how to install it, and which
Neuron SDK releases support it on which target (the support matrix, neuronc.backends.support)."""

from __future__ import annotations

from neuronc._output import out
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt, WideOpt


@command(name="backends")
def backends_command(json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """List backends: available or not, versions, and the install hint when not."""
    from neuronc.backends import backend_names, entry_point_value, get_backend
    from neuronc.backends.support import detect_release, span, supporting

    out.configure(json_mode=json_out, wide=wide)
    rows = []
    texts: list[dict[str, str]] = []  # per row: the named-only note of each target, for people only
    for name in backend_names():
        backend = get_backend(name)
        availability = backend.toolchain.availability()
        releases = {t: span(name, t) for t in sorted(backend.targets) if supporting(name, t)}
        installed = detect_release(availability.versions) if releases else None
        # Releases used for a target only when a profile's sdk: names them (NxDI on inf2/trn1 from 2.29).
        named = {t: _named_only(name, t) for t in releases if _named_only(name, t)}
        rows.append(
            {
                "name": name,
                "entry_point": entry_point_value(name),
                "description": backend.description,
                "available": availability.available,
                "targets": sorted(backend.targets),
                "amp": sorted(backend.rules.amp),
                "versions": availability.versions,
                "reason": availability.reason,
                "install_hint": availability.install_hint,
                "sdk_releases": releases,
                "installed_sdk": installed.version if installed is not None else None,
            }
        )
        texts.append(named)

    def render() -> None:
        table_rows = []
        for row, named in zip(rows, texts, strict=True):
            versions = row["versions"]
            assert isinstance(versions, dict)
            shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v and k != "neuronc")
            status = "available" if row["available"] else f"unavailable: {row['reason']}"
            releases = row["sdk_releases"]
            assert isinstance(releases, dict)
            sdk = "; ".join(f"{t} {r}{named.get(t, '')}" for t, r in releases.items()) or "-"
            if row["installed_sdk"]:
                sdk += f" (installed: {row['installed_sdk']})"
            table_rows.append([row["name"], ", ".join(row["targets"]), sdk, status, shown])  # type: ignore[arg-type]
        out.table(["backend", "targets", "Neuron SDK releases", "status", "versions"], table_rows)
        for row in rows:
            if not row["available"] and row["install_hint"]:
                out.print(f"{row['name']}: {row['install_hint']}")

    out.result({"backends": rows}, render)


def _named_only(backend: str, target: str) -> str:
    """`` (2.29.0–2.31.1 only with sdk:)``: the releases used for the pair only when ``sdk:`` names them."""
    from neuronc.backends.support import supporting

    found = [r.version for r in supporting(backend, target) if r.named_only(backend, target)]
    if not found:
        return ""
    return f" ({found[0] if len(found) == 1 else f'{found[0]}–{found[-1]}'} only with sdk:)"
