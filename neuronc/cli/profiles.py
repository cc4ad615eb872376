"""Profile commands: `validate`, `schema`, `hash`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict

from neuronc._output import out, to_json_text
from neuronc.cli import _cli as cli
from neuronc.cli._app import command, command_failed
from neuronc.cli._options import JsonOpt, ProfilesArg, WideOpt
from neuronc.errors import InvalidInputError, ProfileError

if TYPE_CHECKING:
    from neuronc.backends.base import CompilePlan
    from neuronc.cli._report import JSONObject
    from neuronc.spec import BuildSpec


class BuildDescription(TypedDict):
    """One build of a valid profile, as `validate --json` (and `compile --dry-run`) report it."""

    index: int
    name: str | None
    matrix: JSONObject
    config_hash: str
    hashed_fields: list[str]
    normalized: JSONObject  # BuildSpec.normalized(): the profile as a manifest records it
    plan: dict[str, object]  # CompilePlan.to_json()
    neuron_sdk: dict[str, object] | None  # neuronc.backends.support.release_json


class ProfileDescription(TypedDict):
    path: str
    valid: bool  # True
    warnings: list[str]
    builds: list[BuildDescription]


class InvalidProfile(TypedDict):
    path: str
    valid: bool  # False
    errors: list[str]


@dataclass(frozen=True)
class _Build:
    """A build as `validate` shows it: from the typed spec and plan its document was made of."""

    spec: BuildSpec
    plan: CompilePlan
    config_hash: str
    neuron_sdk: dict[str, object] | None


def describe_profile(path: Path) -> ProfileDescription:
    """Load one profile and describe each build: normalised profile, config hash, planned graphs."""
    return _described(path)[0]


def _described(path: Path) -> tuple[ProfileDescription, list[_Build]]:
    from neuronc.backends.support import release_json
    from neuronc.keys import HASHED_FIELDS
    from neuronc.pipeline.context import resolve_build
    from neuronc.profile import load_profile

    loaded = load_profile(path)
    builds: list[BuildDescription] = []
    shown: list[_Build] = []
    for build in loaded.builds:
        ctx = resolve_build(build, strict=False)
        spec = build.spec
        sdk = release_json(ctx.backend.rules.release_for(spec), spec.backend)
        builds.append(
            {
                "index": spec.build_index,
                "name": spec.name,
                "matrix": spec.matrix_values,
                "config_hash": ctx.key_text,
                # The fields this build's key covers ("environment" only where its backend names variables).
                "hashed_fields": list(ctx.config_key.fields if ctx.config_key is not None else HASHED_FIELDS),
                "normalized": spec.normalized(),
                "plan": ctx.plan.to_json(),
                "neuron_sdk": sdk,
            }
        )
        shown.append(_Build(spec, ctx.plan, ctx.key_text, sdk))
    return {"path": str(path), "valid": True, "warnings": loaded.warnings, "builds": builds}, shown


@command(name="validate")
def validate_command(profiles: ProfilesArg, json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """Validate profiles; print each build's normalised profile, config hash and planned graphs."""
    out.configure(json_mode=json_out, wide=wide)
    results: list[ProfileDescription | InvalidProfile] = []
    valid: list[tuple[ProfileDescription, list[_Build]]] = []
    failures: list[ProfileError] = []
    for path in profiles:
        try:
            described = _described(path)
        except ProfileError as exc:
            failures.append(exc)
            results.append({"path": str(path), "valid": False, "errors": exc.details or [exc.message]})
            continue
        results.append(described[0])
        valid.append(described)

    def render() -> None:
        for result, builds in valid:
            for build in builds:
                _render_build(result["path"], build)
            for warning in result["warnings"]:
                out.warning(warning)

    if not failures:
        out.result({"valid": True, "profiles": results}, render)
        return
    if not out.json_mode:
        render()
    error = failures[0]
    if len(failures) > 1:  # one error that names every problem
        details = [line for exc in failures for line in (exc.details or [exc.message])]
        error = ProfileError(f"{len(failures)} of {len(profiles)} profiles are invalid", details=details)
    raise cli.Exit(command_failed(error, report={"valid": False, "profiles": results}))


def _render_build(path: str, build: _Build) -> None:
    from rich.markup import escape

    spec = build.spec
    seq = spec.sequence
    matrix = ", ".join(f"{k}={v}" for k, v in spec.matrix_values.items())
    label = path + (f" [build {spec.build_index}: {matrix}]" if matrix else "")
    revision = f"@{spec.model.revision}" if spec.model.revision else ""
    # Profile values are user data: escape them so Rich never reads them as markup. Buckets print as
    # the normalised profile (JSON) lists them.
    out.print(f"[bold]{escape(label)}[/bold]  ✓ valid")
    out.print(f"  model {escape(spec.model.id + revision)}")
    out.print(
        escape(
            f"  backend {spec.backend} · target {spec.target} · tp {spec.tp_degree} · "
            f"batch {spec.batch_size} · amp {spec.amp} · weights {spec.weights}"
        )
    )
    out.print(
        escape(
            f"  max_length {seq.max_length} · max_context_length {seq.max_context_length} · "
            f"context buckets {list(seq.context_buckets)} · token buckets {list(seq.token_buckets)}"
        )
    )
    out.print(f"  config hash {build.config_hash}")
    sdk = build.neuron_sdk
    if sdk and sdk.get("release"):
        from neuronc.backends.support import release_line

        out.print(escape(f"  {release_line(sdk)}"))
    graphs = build.plan.graphs
    out.table(
        ["graph", "role", "batch", "bucket"],
        [[g.name, g.role, g.batch, g.bucket] for g in graphs],
        title=f"  {len(graphs)} graph(s); weights: {build.plan.weights_layout}",
    )


@command(name="schema")
def schema_command(
    output: Annotated[Path | None, cli.Option("--out", "-o", help="Write the schema to this file.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print the JSON Schema of profiles (for yaml-language-server and other editors).

    With --out and --json, stdout says what was written: {"out", "bytes"}.
    """
    from neuronc.profile import profile_json_schema

    out.configure(json_mode=json_out)
    text = to_json_text(profile_json_schema())
    if output is None:
        out.result(profile_json_schema())
        return
    from neuronc.fsutil import write_output

    data = text.encode("utf-8")
    write_output(output, data, what="the schema", fsync=True)
    out.result({"out": str(output), "bytes": len(data)}, lambda: out.success(f"wrote {output}"))


@command(name="hash")
def hash_command(
    paths: Annotated[list[Path], cli.Argument(help="Profiles (or bundles) to hash.", show_default=False)],
    diff: Annotated[bool, cli.Option("--diff", help="Compare exactly two: which hashed fields differ.")] = False,
    json_out: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Print config hashes; with --diff A B, name the hashed fields that differ."""
    out.configure(json_mode=json_out, wide=wide)
    if diff and len(paths) != 2:
        msg = f"--diff compares exactly two profiles or bundles, got {len(paths)}"
        raise InvalidInputError(msg)
    keyed = [_hashed_builds(p, resolved=diff) for p in paths]
    if not diff:
        data = {
            "hashes": [
                {"path": str(p), "build": i, "matrix": m, "config_hash": h, "graphs_key": g, "weights_key": w}
                for p, builds in zip(paths, keyed, strict=True)
                for i, (h, _inputs, m, (g, w)) in enumerate(builds)
            ]
        }
        out.result(
            data,
            lambda: out.table(
                ["config hash", "path", "build"], [[r["config_hash"], r["path"], r["build"]] for r in data["hashes"]]
            ),
        )
        return
    from neuronc.keys import diff_inputs

    a_builds, b_builds = keyed
    pairs = (
        list(zip(a_builds, b_builds, strict=False)) if len(a_builds) == len(b_builds) else [(a_builds[0], b_builds[0])]
    )
    comparisons: list[Comparison] = []
    for index, ((ha, ia, _, _), (hb, ib, _, _)) in enumerate(pairs):
        comparisons.append({"build": index, "a": ha, "b": hb, "same": ha == hb, "differences": diff_inputs(ia, ib)})

    def render() -> None:
        for c in comparisons:
            if c["same"]:
                out.print(f"build {c['build']}: same config hash {c['a']}")
                continue
            out.print(f"build {c['build']}: {c['a'][:12]} ≠ {c['b'][:12]}")
            out.table(
                ["field", str(paths[0]), str(paths[1])],
                [[d["field"], to_json_text(d["a"]).strip(), to_json_text(d["b"]).strip()] for d in c["differences"]],
            )

    out.result({"a": str(paths[0]), "b": str(paths[1]), "comparisons": comparisons}, render)


class Comparison(TypedDict):
    """`hash --diff`: one pair of builds, and the hashed fields that differ (keys.diff_inputs)."""

    build: int
    a: str
    b: str
    same: bool
    differences: list[JSONObject]


_NO_KEYS: tuple[str | None, str | None] = (None, None)
if TYPE_CHECKING:
    # (config hash, hashed inputs, matrix values, (graphs key, weights key)) of one build.
    _Hashed = tuple[str, JSONObject, JSONObject, tuple[str | None, str | None]]


def _hashed_builds(path: Path, *, resolved: bool) -> list[_Hashed]:
    """(config hash, hashed inputs, matrix values, (graphs key, weights key)) per build of a profile or
    a bundle (the two keys None for an unresolved build, or a bundle keyed before they existed).

    A Hub model whose revision cannot be resolved here has the hash ``unresolved``; with ``resolved``
    (comparing builds needs their inputs) that is an error naming the build (exit 2).
    """
    if path.is_dir():
        return [_bundle_hash(path)]
    from neuronc.pipeline.context import resolve_build
    from neuronc.profile import load_profile

    result: list[_Hashed] = []
    for build in load_profile(path).builds:
        ctx = resolve_build(build, strict=False)
        spec = build.spec
        if ctx.config_key is None and not resolved:
            result.append((ctx.key_text, {}, spec.matrix_values, _NO_KEYS))
            continue
        key = ctx.config
        result.append((key.hash, key.inputs, spec.matrix_values, (key.graphs_hash, key.weights_hash)))
    return result


def _bundle_hash(path: Path) -> _Hashed:
    from neuronc.bundle import read_manifest

    manifest = read_manifest(path)
    keys = manifest.extra.get("keys")
    split = (keys.get("graphs"), keys.get("weights")) if isinstance(keys, dict) else _NO_KEYS
    return manifest.config_hash, manifest.hashed_inputs, {}, split
