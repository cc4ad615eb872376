"""`neuronc cache-lookup` and `neuronc cache mirror`: the Hugging Face Neuron cache (optimum-neuron's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import app, command
from neuronc.cli._options import JsonOpt
from neuronc.errors import CacheMissError, InvalidInputError
from neuronc.fsutil import format_bytes, plural

if TYPE_CHECKING:
    from neuronc.hubcache import BuildLookup, Filters, LookupResult, Match, Registry, RegistrySource
    from neuronc.progress import ProgressSink

T = TypeVar("T")

cache_app = cli.Group(
    no_args_is_help=True,
    help="Neuron compile caches: the Hugging Face Neuron cache (mirror, synchronize) and the local one "
    "(status, cleanup).",
)
app.add_command(cache_app, name="cache")

_INSTANCE_TYPES = ("inf2", "trn1", "trn1n", "trn2")
_DTYPES = ("bf16", "fp16", "fp32", "bfloat16", "float16", "float32")

RepoOpt = Annotated[
    str | None,
    cli.Option(
        "--repo",
        help="Cache repository. Default, as optimum-neuron: $CUSTOM_CACHE_REPO, then "
        "$HF_HOME/optimum_neuron_custom_cache, then aws-neuron/optimum-neuron-cache.",
    ),
]
SnapshotOpt = Annotated[
    Path | None,
    cli.Option("--snapshot", help="Read a local copy (from `neuronc cache mirror`) instead of the Hub; never online."),
]
CompilerOpt = Annotated[
    str | None,
    cli.Option(
        "--compiler-version", help="neuronx-cc version, matched by dotted prefix (2.21 matches 2.21.33363.0+...)."
    ),
]
OptimumOpt = Annotated[
    str | None,
    cli.Option("--optimum-neuron-version", help="optimum-neuron version that wrote the entry, by dotted prefix."),
]


@command(
    name="cache-lookup",
    epilog="Examples: neuronc cache-lookup meta-llama/Llama-3.1-8B --tp 8 ; "
    "neuronc cache-lookup profiles/llama3.1-8b-optimum-neuron-tgi.yaml --require-hit --json",
)
def cache_lookup_command(
    target: Annotated[str, cli.Argument(help="Model id (org/name), local model directory, or profile YAML.")],
    repo: RepoOpt = None,
    snapshot: SnapshotOpt = None,
    instance_type: Annotated[
        str | None, cli.Option("--instance-type", help="inf2, trn1, trn1n or trn2 (inf2 and trn1n are trn1 entries).")
    ] = None,
    tp: Annotated[int | None, cli.Option("--tp", min=1, help="Tensor-parallel degree (exact).")] = None,
    batch_size: Annotated[int | None, cli.Option("--batch-size", min=1, help="Batch size (exact).")] = None,
    sequence_length: Annotated[
        int | None, cli.Option("--sequence-length", min=1, help="Sequence length (exact).")
    ] = None,
    dtype: Annotated[str | None, cli.Option("--dtype", help="bf16, fp16 or fp32 (or bfloat16 ...).")] = None,
    compiler_version: CompilerOpt = None,
    optimum_neuron_version: OptimumOpt = None,
    task: Annotated[str, cli.Option("--task", help="optimum-neuron task of the entries.")] = "text-generation",
    json_out: JsonOpt = False,
    require_hit: Annotated[
        bool,
        cli.Option("--require-hit", help="Exit 6 when nothing matches (a model) or any build misses (a profile)."),
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
    from neuronc.hubcache.paths import printable

    if value is None or value.lower() in allowed:
        return value.lower() if value else None
    raise InvalidInputError(f"{flag} {printable(value)}: not one of {', '.join(allowed)}")


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
    revision = f" @ {src.revision[:12]}" if src.revision else ""
    count = len(registry.registries)
    out.info(
        f"source: {src.kind} {src.name}{revision}: {plural(len(registry), 'entry', 'entries')} read from "
        f"{plural(count, 'registry', 'registries')}"
    )
    for note in registry.notes:
        out.warning(note)
    problems = registry.problems
    for problem in problems[:5]:
        out.warning(f"skipped {problem.path}: {problem.reason}")
    if len(problems) > 5:
        out.warning(f'... and {len(problems) - 5} more (all of them under "skipped" in --json)')
    if problems:
        out.warning(f"{plural(len(problems), 'registry file')} skipped")


def _result(data: Mapping[str, object], render: Callable[[], None]) -> None:
    """Print a result: ``--json`` is one valid UTF-8 document whatever bytes the registry's names hold."""
    from neuronc.hubcache.paths import json_safe

    out.result(json_safe(data), render)


# -- model ids --------------------------------------------------------------------------------------


def _lookup_model(model: str, source: RegistrySource, filters: Filters, task: str, require_hit: bool) -> None:
    from neuronc.hubcache import lookup_model
    from neuronc.hubcache.paths import printable

    result: LookupResult = _with_progress(lambda p: lookup_model(model, source, filters, task=task, progress=p))
    _report_registry(result.registry)
    for note in result.context.notes:
        out.info(f"note: {note}")
    shown = printable(model)

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
        # On a narrow terminal, what tells rows apart stays: notes, the model id (when it varies) and the
        # revision give way first; the compiler and optimum-neuron versions last (columns with one value
        # on every row go before any of these, said once below the table).
        optional = ["neuronx-cc", "optimum-neuron", "revision", "model", "notes"]
        out.table(columns, rows, title=f"Cached configurations for {shown} ({len(rows)})", optional=optional)
        if result.other_tasks:
            others = ", ".join(f"{n} for {t}" for t, n in sorted(result.other_tasks.items()))
            out.info(f"also cached for other tasks: {others} (use --task)")

    _result(result.to_json(), render)
    if require_hit and not result.hit:
        _miss(_nothing_message(result))


def _nothing_message(result: LookupResult) -> str:
    from neuronc.hubcache.paths import printable

    model = printable(result.model)
    if result.matches:  # all of them written for this model id with another architecture
        return f"No cached configuration for {model} with its current architecture."
    if result.related:
        return f"No cached configuration for {model} matches the filters ({result.related} without them)."
    return f"No cached configurations for {model}."


_SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _row(match: Match) -> list[object]:
    e = match.entry
    return [
        e.batch_size,
        _cell(e.sequence_length),
        e.tp_degree,
        _SHORT_DTYPES.get(e.dtype or "", _cell(e.dtype)),
        _cell(e.target),
        e.compiler_version.split("+", 1)[0],  # the build suffix is in --json
        e.optimum_version,
        _cell(e.checkpoint_revision)[:8],
        _model_cell(match),
        _short_note(match),
    ]


def _model_cell(match: Match) -> str:
    from neuronc.hubcache import Relation

    if match.relation == Relation.ARCHITECTURE:
        return match.entry.model_id or "?"
    return "config differs" if match.relation == Relation.CONFIG_DIFFERS else ""


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _short_note(match: Match) -> str:
    from neuronc.hubcache import Hidden, Relation
    from neuronc.hubcache.paths import printable

    if match.relation == Relation.CONFIG_DIFFERS:
        return "differs: " + ", ".join(printable(key) for key in match.differing[:3])
    if Hidden.ALIAS_ONLY in match.hidden:
        return "alias only"
    for reason in (Hidden.DTYPE, Hidden.HEAD_DIM, Hidden.DIGEST):
        if reason in match.hidden:
            return f"hidden: {reason}"
    return ""


def _miss(message: str) -> None:
    if out.json_mode:
        out.warning(message)
        raise cli.Exit(6)
    raise CacheMissError(message, hint="--require-hit: compile it, or relax the filters")


# -- profiles ---------------------------------------------------------------------------------------


def _lookup_profile(path: Path, source: RegistrySource, constraints: Filters, require_hit: bool) -> None:
    from neuronc.hubcache import LookupStatus, lookup_builds
    from neuronc.hubcache.paths import printable
    from neuronc.profile import load_profile

    loaded = load_profile(path)
    for warning in loaded.warnings:
        out.warning(warning)
    builds, registry = _with_progress(lambda p: lookup_builds(loaded.builds, source, constraints, progress=p))
    _report_registry(registry)
    misses = [b for b in builds if b.status == LookupStatus.MISS]
    data = {
        "schema_version": 1,
        "kind": "profile",
        "profile": str(path),
        "source": registry.source.to_json() if registry else None,
        "constraints": constraints.to_json(),
        "hit": not misses,
        "builds": [b.to_json() for b in builds],
        "stats": registry.stats().to_json() if registry else None,
        "skipped": [p.to_json() for p in registry.problems] if registry else [],
    }

    def render() -> None:
        for build in builds:
            _render_build(build)

    _result(data, render)
    if require_hit and misses:
        _miss(f"{len(misses)} of {plural(len(builds), 'build')} of {printable(str(path))} are not in the cache")


_STATUS_WORD = {"hit": "HIT", "miss": "MISS", "not-applicable": "n/a"}


def _render_build(build: BuildLookup) -> None:
    from rich.markup import escape

    from neuronc.hubcache import Relation

    w = build.wanted
    spec = build.spec
    label = f"build {spec.build_index}" + (f" ({spec.name})" if spec.name else "")
    if spec.matrix_values:
        label += " [" + ", ".join(f"{k}={v}" for k, v in spec.matrix_values.items()) + "]"
    target = w.target if w.target is not None else spec.target
    shape = f"bs {w.batch_size}, seq {w.sequence_length}, tp {w.tp_degree}, {w.dtype}, {target}"
    lines = [f"{_STATUS_WORD[build.status]}  {label}: {spec.model.id}: {shape}"]
    for match in build.hits[:3]:
        e = match.entry
        who = "" if match.relation == Relation.MODEL else f", written for {e.model_id}"
        lines.append(f"      cached: neuronx-cc {e.compiler_version}, optimum-neuron {e.optimum_version}{who}")
    if len(build.hits) > 3:
        lines.append(f"      ... and {len(build.hits) - 3} more")
    for near in build.nearest:
        e = near.match.entry
        diffs = ", ".join(f"{d.field} {_shown(d.entry)} (want {_shown(d.wanted)})" for d in near.differences)
        lines.append(f"      nearest: {diffs}; optimum-neuron {e.optimum_version}, {e.model_id}")
    lines.extend(f"      note: {note}" for note in build.notes)
    for line in lines:
        out.print(escape(line))


def _shown(value: object) -> str:
    """A field value in a sentence: "not set" rather than Python's None."""
    return "not set" if value is None else str(value)


# -- mirror -----------------------------------------------------------------------------------------


@command(
    cache_app, name="mirror", epilog="Example: neuronc cache mirror ./neuron-cache-registry --compiler-version 2.21"
)
def cache_mirror_command(
    directory: Annotated[Path, cli.Argument(help="Where to write the copy (created if missing).")],
    repo: RepoOpt = None,
    compiler_version: CompilerOpt = None,
    optimum_neuron_version: OptimumOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Download only the registry folders of a cache repository, for `cache-lookup --snapshot`."""
    from neuronc.hubcache import HubSource
    from neuronc.hubcache.mirror import mirror  # not the package attribute: importing the submodule replaces it
    from neuronc.hubcache.paths import printable

    out.configure(json_mode=json_out)
    source = HubSource.from_environment(repo)
    result = _with_progress(
        lambda p: mirror(
            source, directory, compiler_version=compiler_version, optimum_version=optimum_neuron_version, progress=p
        )
    )

    def render() -> None:
        out.print(
            f"Mirrored {plural(result.files, 'registry file')} ({format_bytes(result.bytes)}) of {result.repo} "
            f"@ {result.revision[:12]} into {printable(str(directory))}"
        )
        out.print(f"Use it with: neuronc cache-lookup MODEL --snapshot {printable(str(directory))}")

    _result(result.to_json(), render)
