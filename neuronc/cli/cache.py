"""`neuronc cache-lookup` and `neuronc cache mirror`: the Hugging Face Neuron cache (optimum-neuron's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from neuronc._output import out
from neuronc.cli._app import app, command
from neuronc.cli._options import JsonOpt
from neuronc.errors import CacheMissError, InvalidInputError

if TYPE_CHECKING:
    from neuronc.hubcache import BuildLookup, Filters, LookupResult, Match, Registry, RegistrySource
    from neuronc.progress import ProgressSink

T = TypeVar("T")

cache_app = typer.Typer(
    no_args_is_help=True,
    help="The Hugging Face Neuron cache (optimum-neuron's compile cache on the Hub).",
    rich_markup_mode=None,
)
app.add_typer(cache_app, name="cache")

_INSTANCE_TYPES = ("inf2", "trn1", "trn1n", "trn2")
_DTYPES = ("bf16", "fp16", "fp32", "bfloat16", "float16", "float32")

RepoOpt = Annotated[
    str | None,
    typer.Option(
        "--repo",
        help="Cache repository. Default, as optimum-neuron: $CUSTOM_CACHE_REPO, then "
        "$HF_HOME/optimum_neuron_custom_cache, then aws-neuron/optimum-neuron-cache.",
    ),
]
SnapshotOpt = Annotated[
    Path | None,
    typer.Option(
        "--snapshot", help="Read a local copy (from `neuronc cache mirror`) instead of the Hub; never online."
    ),
]
CompilerOpt = Annotated[
    str | None,
    typer.Option(
        "--compiler-version", help="neuronx-cc version, matched by dotted prefix (2.21 matches 2.21.33363.0+...)."
    ),
]
OptimumOpt = Annotated[
    str | None,
    typer.Option("--optimum-neuron-version", help="optimum-neuron version that wrote the entry, by dotted prefix."),
]


@command(
    name="cache-lookup",
    epilog="Examples: neuronc cache-lookup meta-llama/Llama-3.1-8B --tp 8 ; "
    "neuronc cache-lookup profiles/llama3.1-8b-optimum-neuron-tgi.yaml --require-hit --json",
)
def cache_lookup_command(
    target: Annotated[str, typer.Argument(help="Model id (org/name), local model directory, or profile YAML.")],
    repo: RepoOpt = None,
    snapshot: SnapshotOpt = None,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="inf2, trn1, trn1n or trn2 (inf2 and trn1n are trn1 entries).")
    ] = None,
    tp: Annotated[int | None, typer.Option("--tp", min=1, help="Tensor-parallel degree (exact).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help="Batch size (exact).")] = None,
    sequence_length: Annotated[
        int | None, typer.Option("--sequence-length", min=1, help="Sequence length (exact).")
    ] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="bf16, fp16 or fp32 (or bfloat16 ...).")] = None,
    compiler_version: CompilerOpt = None,
    optimum_neuron_version: OptimumOpt = None,
    task: Annotated[str, typer.Option("--task", help="optimum-neuron task of the entries.")] = "text-generation",
    json_out: JsonOpt = False,
    require_hit: Annotated[
        bool,
        typer.Option("--require-hit", help="Exit 6 when nothing matches (a model) or any build misses (a profile)."),
    ] = False,
) -> None:
    """List cached configurations of a model, or check a profile's builds against the cache."""
    from neuronc.hubcache import Filters

    out.configure(json_mode=json_out)
    filters = Filters(
        instance_type=_choice(instance_type, _INSTANCE_TYPES, "--instance-type"),
        tp_degree=tp,
        batch_size=batch_size,
        sequence_length=sequence_length,
        dtype=_choice(dtype, _DTYPES, "--dtype"),
        compiler_version=compiler_version,
        optimum_neuron_version=optimum_neuron_version,
    )
    source = _source(repo, snapshot)
    if Path(target).suffix in (".yaml", ".yml"):
        if filters.shape_filters:
            msg = "--instance-type, --tp, --batch-size, --sequence-length and --dtype apply to a model id"
            raise InvalidInputError(msg, hint="a profile sets its own shapes; --compiler-version still applies")
        _lookup_profile(Path(target), source, filters, require_hit)
    else:
        _lookup_model(target, source, filters, task, require_hit)


def _choice(value: str | None, allowed: tuple[str, ...], flag: str) -> str | None:
    if value is None or value.lower() in allowed:
        return value.lower() if value else None
    msg = f"{flag} {value!r} is not one of {', '.join(allowed)}"
    raise InvalidInputError(msg)


def _source(repo: str | None, snapshot: Path | None) -> RegistrySource:
    from neuronc.hubcache import HubSource, SnapshotSource

    if snapshot is not None:
        if repo is not None:
            raise InvalidInputError("--repo and --snapshot are exclusive", hint="a snapshot is one repository's copy")
        return SnapshotSource(snapshot)
    return HubSource.from_environment(repo)


def _with_progress(run: Callable[[ProgressSink], T]) -> T:
    with out.progress() as progress:
        return run(progress)


def _report_registry(registry: Registry | None) -> None:
    if registry is None:
        return
    src = registry.source
    where = src.get("path") or src.get("repo")
    revision = f" @ {str(src['revision'])[:12]}" if src.get("revision") else ""
    stats = registry.stats()
    out.info(
        f"source: {src['kind']} {where}{revision}: {stats['entries_read']} entries read from "
        f"{len(stats['registries'])} registr{'y' if len(stats['registries']) == 1 else 'ies'}"
    )
    for note in registry.notes:
        out.warning(note)
    for problem in registry.problems[:5]:
        out.warning(f"skipped {problem.path}: {problem.reason}")
    if len(registry.problems) > 5:
        out.warning(f"... and {len(registry.problems) - 5} more")
    if registry.problems:
        out.warning(
            f"{len(registry.problems)} broken registry entr{'y' if len(registry.problems) == 1 else 'ies'} skipped"
        )


# -- model ids --------------------------------------------------------------------------------------


def _lookup_model(model: str, source: RegistrySource, filters: Filters, task: str, require_hit: bool) -> None:
    from neuronc.hubcache import lookup_model

    result: LookupResult = _with_progress(lambda p: lookup_model(model, source, filters, task=task, progress=p))
    _report_registry(result.registry)
    for note in result.context.notes:
        out.info(f"note: {note}")

    def render() -> None:
        if not result.matches:
            out.print(_nothing_message(result))
            return
        rows = [_row(m) for m in result.matches]
        columns = ["bs", "seq", "tp", "dtype", "target", "neuronx-cc", "optimum-neuron", "revision", "model", "notes"]
        # Drop the model and notes columns when no row uses them (the common case).
        keep = [i for i, name in enumerate(columns) if name not in ("model", "notes") or any(r[i] for r in rows)]
        columns = [columns[i] for i in keep]
        rows = [[r[i] for i in keep] for r in rows]
        title = f"Cached configurations for {model} ({len(rows)})"
        out.table(columns, rows, title=title)
        if result.other_tasks:
            others = ", ".join(f"{n} for {t}" for t, n in sorted(result.other_tasks.items()))
            out.info(f"also cached for other tasks: {others} (use --task)")

    out.result(result.to_json(), render)
    if require_hit and not result.hit:
        _miss(_nothing_message(result))


def _nothing_message(result: LookupResult) -> str:
    if result.matches:  # all of them written for this model id with another architecture
        return f"No cached configuration for {result.model} with its current architecture."
    if result.related:
        return f"No cached configuration for {result.model} matches the filters ({result.related} without them)."
    return f"No cached configurations for {result.model}."


_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _row(match: Match) -> list[Any]:
    e = match.entry
    model = {"model": "", "architecture": e.model_id or "?", "model-config-differs": "config differs"}[match.relation]
    return [
        e.batch_size,
        e.sequence_length if e.sequence_length is not None else "-",
        e.tp_degree,
        _SHORT_DTYPES.get(e.dtype or "", e.dtype or "-"),
        e.target or "-",
        e.compiler_version.split("+", 1)[0],  # the build suffix is in --json
        e.optimum_version,
        (e.checkpoint_revision or "-")[:8],
        model,
        _short_note(match),
    ]


def _short_note(match: Match) -> str:
    if match.relation == "model-config-differs":
        return "differs: " + ", ".join(match.differing[:3])
    if match.visible_to_optimum_neuron is False and match.entry.optimum_version == "0.4.5":
        for note in match.notes:
            if "hidden from" in note:
                return "hidden: " + ("dtype" if "dtype" in note else "head_dim" if "head_dim" in note else "digest")
            if "alias file only" in note:
                return "alias only"
    return ""


def _miss(message: str) -> None:
    if out.json_mode:
        out.warning(message)
        raise typer.Exit(6)
    raise CacheMissError(message, hint="--require-hit: compile it, or relax the filters")


# -- profiles ---------------------------------------------------------------------------------------


def _lookup_profile(path: Path, source: RegistrySource, constraints: Filters, require_hit: bool) -> None:
    from neuronc.hubcache import lookup_builds
    from neuronc.profile import load_profile

    loaded = load_profile(path)
    for warning in loaded.warnings:
        out.warning(warning)
    builds, registry = _with_progress(lambda p: lookup_builds(loaded.builds, source, constraints, progress=p))
    _report_registry(registry)
    misses = [b for b in builds if b.status == "miss"]
    data = {
        "schema_version": 1,
        "kind": "profile",
        "profile": str(path),
        "source": registry.source if registry else None,
        "constraints": constraints.to_json(),
        "hit": not misses,
        "builds": [b.to_json() for b in builds],
        "stats": registry.stats() if registry else None,
        "skipped": [p.to_json() for p in registry.problems] if registry else [],
    }

    def render() -> None:
        for build in builds:
            _render_build(build)

    out.result(data, render)
    if require_hit and misses:
        _miss(f"{len(misses)} of {len(builds)} builds of {path} are not in the cache")


def _render_build(build: BuildLookup) -> None:
    from rich.markup import escape

    w = build.wanted
    spec = build.spec
    label = f"build {spec.build_index}" + (f" ({spec.name})" if spec.name else "")
    if spec.matrix_values:
        label += " [" + ", ".join(f"{k}={v}" for k, v in spec.matrix_values.items()) + "]"
    # The Neuron cache has no entry for every field (no target for cpu builds): show what is known.
    shown = (w["dtype"], w["target"])
    shape = ", ".join(
        [f"bs {w['batch_size']}", f"seq {w['sequence_length']}", f"tp {w['tp_degree']}"]
        + [str(v) for v in shown if v is not None]
    )
    status = {"hit": "HIT", "miss": "MISS", "not-applicable": "n/a"}[build.status]
    lines = [f"{status}  {label}: {spec.model.id}: {shape}"]
    for match in build.hits[:3]:
        e = match.entry
        who = "" if match.relation == "model" else f", written for {e.model_id}"
        lines.append(f"      cached: neuronx-cc {e.compiler_version}, optimum-neuron {e.optimum_version}{who}")
    if len(build.hits) > 3:
        lines.append(f"      ... and {len(build.hits) - 3} more")
    for near in build.nearest:
        e = near.match.entry
        diffs = ", ".join(f"{d.field} {d.entry} (want {d.wanted})" for d in near.differences)
        lines.append(f"      nearest: {diffs}; optimum-neuron {e.optimum_version}, {e.model_id}")
    lines.extend(f"      note: {note}" for note in build.notes)
    for line in lines:
        out.print(escape(line))


# -- mirror -----------------------------------------------------------------------------------------


@command(
    cache_app, name="mirror", epilog="Example: neuronc cache mirror ./neuron-cache-registry --compiler-version 2.21"
)
def cache_mirror_command(
    directory: Annotated[Path, typer.Argument(help="Where to write the copy (created if missing).")],
    repo: RepoOpt = None,
    compiler_version: CompilerOpt = None,
    optimum_neuron_version: OptimumOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Download only the registry folders of a cache repository, for `cache-lookup --snapshot`."""
    from neuronc.hubcache import HubSource

    out.configure(json_mode=json_out)
    source = HubSource.from_environment(repo)
    result = _with_progress(
        lambda p: source.mirror(
            directory, compiler_version=compiler_version, optimum_version=optimum_neuron_version, progress=p
        )
    )

    def render() -> None:
        out.print(
            f"Mirrored {result['files']} registry files ({result['bytes']} bytes) of {result['repo']} "
            f"@ {str(result['revision'])[:12]} into {directory}"
        )
        out.print(f"Use it with: neuronc cache-lookup MODEL --snapshot {directory}")

    out.result(result, render)
