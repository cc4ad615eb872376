"""Compile profiles: YAML loading with positions, schema, normalisation, matrix expansion.

``load_profile(path)`` returns a ``LoadedProfile`` whose ``builds`` are fully resolved
``BuildSpec`` objects, one per matrix combination. Every problem in a file is collected and raised
together as one ``ProfileError`` whose details read ``file:line:column: field: message``.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from neuronc.errors import ProfileError
from neuronc.locations import local_model_dir

MAX_PROFILE_BYTES = 256 * 1024
# YAML aliases can make a tiny file expand exponentially ("billion laughs"); cap the node count.
MAX_YAML_NODES = 20_000
TARGETS = ("inf2", "trn1", "trn2", "cpu")
NEURON_TARGETS = ("inf2", "trn1", "trn2")
AMP_TO_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
WEIGHT_MODES = ("presharded", "on-load", "reference")
TASKS = ("text-generation", "feature-extraction", "text-classification", "fill-mask", "token-classification")
# Fields a `matrix:` may vary, as dotted paths into the profile.
MATRIX_FIELDS = (
    "batch_size",
    "tp_degree",
    "amp",
    "target",
    "backend",
    "weights",
    "model.revision",
    "sequence.max_length",
    "sequence.max_context_length",
    "sequence.context_buckets",
    "sequence.token_buckets",
)

PositiveInt = Annotated[int, Field(ge=1, le=1 << 20, strict=True)]
Buckets = list[PositiveInt] | Literal["auto"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    id: str = Field(min_length=1, description="Hugging Face Hub id, or a local directory")
    revision: str | None = Field(default=None, description="Hub revision (commit sha, tag or branch)")
    task: Literal[TASKS] = "text-generation"  # type: ignore[valid-type]


class SequenceSection(_Strict):
    max_length: PositiveInt = Field(description="Total tokens (prompt + generated) per sequence")
    max_context_length: PositiveInt | None = Field(default=None, description="Longest prompt; default max_length")
    context_buckets: Buckets | None = Field(default=None, description="Prompt-length buckets, or 'auto'")
    token_buckets: Buckets | None = Field(default=None, description="KV-length buckets for generation, or 'auto'")


class CompilerSection(_Strict):
    flags: list[str] = Field(default_factory=list, description="Extra compiler flags, passed through")


class ProfileModel(_Strict):
    """The profile schema as written by users (before matrix expansion and defaults)."""

    name: str | None = Field(default=None, description="Display name; not part of the config hash")
    description: str | None = Field(default=None, description="Free text; not part of the config hash")
    model: ModelSection
    backend: str = Field(description="Backend name, see `neuronc backends`")
    target: Literal[TARGETS]  # type: ignore[valid-type]
    tp_degree: PositiveInt = 1
    batch_size: PositiveInt = 1
    amp: Literal["fp32", "fp16", "bf16"] | None = Field(default=None, description="default: bf16 (fp32 on cpu)")
    sequence: SequenceSection
    weights: Literal[WEIGHT_MODES] = "presharded"  # type: ignore[valid-type]
    compiler: CompilerSection = Field(default_factory=CompilerSection)
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options")
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="Lists that expand into builds")

    @field_validator("matrix")
    @classmethod
    def _matrix_lists_not_empty(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                msg = f"matrix '{key}' is an empty list"
                raise ValueError(msg)
        return value


class ResolvedSequence(_Strict):
    max_length: int
    max_context_length: int
    context_buckets: tuple[int, ...]
    token_buckets: tuple[int, ...]


class BuildSpec(_Strict):
    """One fully resolved build: what a backend compiles into one bundle."""

    model: ModelSection
    backend: str
    target: str
    tp_degree: int
    batch_size: int
    amp: str
    sequence: ResolvedSequence
    weights: str
    compiler_flags: tuple[str, ...]
    options: dict[str, Any]
    # Not part of the config hash:
    name: str | None = None
    description: str | None = None
    profile_path: str | None = None
    build_index: int = 0
    matrix_values: dict[str, Any] = Field(default_factory=dict)

    @property
    def dtype(self) -> str:
        return AMP_TO_DTYPE[self.amp]

    def normalized(self) -> dict[str, Any]:
        """The compile-relevant profile, normalised (what manifests and `validate` show)."""
        return self.model_dump(
            mode="json", exclude={"name", "description", "profile_path", "build_index", "matrix_values"}
        )


@dataclass
class LoadedProfile:
    path: Path
    text: str
    builds: list[BuildSpec]
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------
# YAML with positions
# ------------------------------------------------------------------------------------------------

Position = tuple[int, int]  # 1-based line, column
# Plain YAML only: the core schema's tags. Python tags (tag:yaml.org,2002:python/...) are refused.
_ALLOWED_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("map", "seq", "str", "int", "float", "bool", "null", "merge", "timestamp")
)


class _YamlTree:
    """A YAML document turned into plain data, with the position of every key and value."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.key_pos: dict[tuple[Any, ...], Position] = {}
        self.value_pos: dict[tuple[Any, ...], Position] = {}
        self.problems: list[str] = []
        self._nodes = 0

    def load(self, text: str) -> Any:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            return self._walk(loader, node, ())
        finally:
            loader.dispose()

    def _walk(self, loader: yaml.SafeLoader, node: yaml.Node, path: tuple[Any, ...]) -> Any:
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            msg = f"more than {MAX_YAML_NODES} YAML nodes (aliases expanding?)"
            raise _TooLarge(msg)
        self.value_pos[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if node.tag not in _ALLOWED_TAGS:
            self.problems.append(self.at(path, f"YAML tag '{node.tag}' is not allowed (plain YAML only)", node))
            return None
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    self.problems.append(self.at(path, f"keys must be plain scalars, got {key!r}", key_node))
                    continue
                if key in result:
                    first = self.key_pos.get((*path, key), (0, 0))
                    self.problems.append(
                        self.at(
                            (*path, key),
                            f"duplicate key '{key}' (first defined on line {first[0]})",
                            key_node,
                        )
                    )
                    continue
                self.key_pos[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                result[key] = self._walk(loader, value_node, (*path, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self._walk(loader, child, (*path, i)) for i, child in enumerate(node.value)]
        return loader.construct_object(node, deep=True)

    def position(self, path: Sequence[Any]) -> Position:
        """Best position for a field path: the key if present, else its nearest present parent."""
        p = tuple(path)
        while p:
            if p in self.key_pos:
                return self.key_pos[p]
            if p in self.value_pos:
                return self.value_pos[p]
            p = p[:-1]
        return self.value_pos.get((), (1, 1))

    def at(self, path: Sequence[Any], message: str, node: yaml.Node | None = None) -> str:
        if node is not None:
            line, col = node.start_mark.line + 1, node.start_mark.column + 1
        else:
            line, col = self.position(path)
        return f"{self.filename}:{line}:{col}: {format_path(path) or '<root>'}: {message}"


class _TooLarge(Exception):
    pass


def format_path(path: Sequence[Any]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


# ------------------------------------------------------------------------------------------------
# Loading and validation
# ------------------------------------------------------------------------------------------------


def load_profile(path: str | os.PathLike[str], *, check_model_config: bool = True) -> LoadedProfile:
    """Load, validate and expand a profile file; raise ProfileError listing every problem."""
    p = Path(path)
    display = str(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        msg = f"{display}: no such profile"
        raise ProfileError(msg, hint="pass the path of a YAML profile, e.g. profiles/tiny-llama-cpu.yaml") from None
    except OSError as exc:
        msg = f"{display}: cannot read profile: {exc.strerror}"
        raise ProfileError(msg) from None
    if p.is_dir():
        msg = f"{display}: is a directory, not a profile"
        raise ProfileError(msg)
    if size > MAX_PROFILE_BYTES:
        msg = f"{display}: profile is {size} bytes; the limit is {MAX_PROFILE_BYTES}"
        raise ProfileError(msg)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{display}: not UTF-8 text (byte {exc.start})"
        raise ProfileError(msg) from None
    except OSError as exc:
        msg = f"{display}: cannot read profile: {exc.strerror}"
        raise ProfileError(msg) from None
    return parse_profile(text, display, base_dir=p.parent, check_model_config=check_model_config)


def parse_profile(
    text: str,
    filename: str = "<profile>",
    *,
    base_dir: Path | None = None,
    check_model_config: bool = True,
) -> LoadedProfile:
    """Validate profile text; ``base_dir`` resolves relative local model paths."""
    tree = _YamlTree(filename)
    try:
        data = tree.load(text)
    except _TooLarge as exc:
        raise ProfileError(f"{filename}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        what = exc.problem or exc.context or "invalid YAML"
        if "could not determine a constructor" in str(exc):
            what = f"{what} (only plain YAML is allowed: no tags such as !!python/object)"
        msg = f"{where}: invalid YAML: {what}"
        raise ProfileError(msg) from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{filename}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{filename}: YAML nested too deeply") from None

    problems = list(tree.problems)
    if data is None and problems:
        raise ProfileError(f"{filename}: invalid profile", details=problems, hint=_SCHEMA_HINT)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        problems.append(f"{filename}:1:1: <root>: a profile is a mapping of fields, but this file is {kind}")
        raise ProfileError(f"{filename}: invalid profile", details=problems, hint=_SCHEMA_HINT)

    builds: list[BuildSpec] = []
    warnings: list[str] = []
    matrix_problems = _check_matrix_shape(data.get("matrix"), tree)
    problems.extend(matrix_problems)
    combos = [{}] if matrix_problems else _matrix_combinations(data.get("matrix") or {})
    per_build: list[list[str]] = []
    for index, combo in enumerate(combos):
        build_problems: list[str] = []
        spec = _build_one(data, combo, index, tree, filename, base_dir, check_model_config, build_problems, warnings)
        per_build.append(build_problems)
        if spec is not None:
            builds.append(spec)
    # A problem every build shares is reported once; one that only some builds have names them.
    builds_with: dict[str, list[int]] = {}
    for index, build_problems in enumerate(per_build):
        for problem in build_problems:
            builds_with.setdefault(problem, []).append(index)
    for problem, indices in builds_with.items():
        if len(indices) < len(combos):
            problem = f"{problem} (matrix build{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))})"
        problems.append(problem)
    if problems:
        problems.sort(key=_problem_position)
        count = len(problems)
        msg = f"{filename}: {count} problem{'s' if count != 1 else ''} in profile"
        raise ProfileError(msg, details=problems, hint=_SCHEMA_HINT)
    return LoadedProfile(path=Path(filename), text=text, builds=builds, warnings=sorted(set(warnings)))


_SCHEMA_HINT = "see docs/profiles.md, or run `neuronc schema` for the JSON Schema your editor can check against"


def _problem_position(problem: str) -> tuple[int, int]:
    parts = problem.split(":")
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return (0, 0)


def _combo_text(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in combo.items())


def _check_matrix_shape(matrix: Any, tree: _YamlTree) -> list[str]:
    if matrix is None:
        return []
    if not isinstance(matrix, dict):
        return [tree.at(("matrix",), "must be a mapping of field -> list of values")]
    problems = []
    for key, values in matrix.items():
        if key not in MATRIX_FIELDS:
            close = difflib.get_close_matches(str(key), MATRIX_FIELDS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            problems.append(tree.at(("matrix", key), f"cannot vary '{key}'.{hint} Allowed: {', '.join(MATRIX_FIELDS)}"))
        elif not isinstance(values, list) or not values:
            problems.append(tree.at(("matrix", key), "must be a non-empty list of values"))
        elif len(values) != len({json.dumps(v, sort_keys=True) for v in values}):
            problems.append(tree.at(("matrix", key), "lists the same value twice"))
    total = 1
    for values in matrix.values():
        total *= len(values) if isinstance(values, list) else 1
    if total > 1024:
        problems.append(tree.at(("matrix",), f"expands to {total} builds; the limit is 1024"))
    return problems


def _matrix_combinations(matrix: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(matrix)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(matrix[k] for k in keys))]


def _apply_combo(data: Mapping[str, Any], combo: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps({k: v for k, v in data.items() if k != "matrix"}, default=str))
    for dotted, value in combo.items():
        parts = dotted.split(".")
        node = result
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return result


def _build_one(
    data: Mapping[str, Any],
    combo: Mapping[str, Any],
    index: int,
    tree: _YamlTree,
    filename: str,
    base_dir: Path | None,
    check_model_config: bool,
    problems: list[str],
    warnings: list[str],
) -> BuildSpec | None:
    raw = _apply_combo(data, combo)
    # Positions of values that came from the matrix point at the matrix entry.
    combo_paths = {tuple(k.split(".")): ("matrix", k) for k in combo}

    def where(path: Sequence[Any]) -> tuple[Any, ...]:
        p = tuple(path)
        for prefix, matrix_path in combo_paths.items():
            if p[: len(prefix)] == prefix:
                return matrix_path
        return p

    def problem(path: Sequence[Any], message: str) -> None:
        line, col = tree.position(where(path))
        problems.append(f"{filename}:{line}:{col}: {format_path(path)}: {message}")

    model: ProfileModel | None = None
    failed: set[tuple[Any, ...]] = set()
    try:
        model = ProfileModel.model_validate(raw)
    except ValidationError as exc:
        reported: set[tuple[Any, ...]] = set()
        for error in exc.errors():
            loc = tuple(error["loc"])
            branch = next((i for i, part in enumerate(loc) if _is_union_branch(part)), None)
            if branch is not None:
                # pydantic reports each member of a union; say once what the field accepts.
                loc = loc[:branch]
                if loc in reported:
                    continue
                reported.add(loc)
                failed.add(loc)
                problem(loc, f"must be a list of positive integers or 'auto', got {_raw_at(raw, loc)!r}")
                continue
            failed.add(loc)
            problem(loc, _pydantic_message(error))
    # Semantic checks run on every field that is well-typed, even when others are not, so a user
    # sees every problem in one pass.
    view = _LenientView(raw, failed)
    count_before = len(problems)
    resolved = _check_semantics(view, filename, base_dir, check_model_config, problem, warnings)
    if model is None or resolved is None or len(problems) > count_before:
        return None
    context_buckets, token_buckets, amp = resolved
    seq = model.sequence
    return BuildSpec(
        model=model.model,
        backend=model.backend,
        target=model.target,
        tp_degree=model.tp_degree,
        batch_size=model.batch_size,
        amp=amp,
        sequence=ResolvedSequence(
            max_length=seq.max_length,
            max_context_length=seq.max_context_length or seq.max_length,
            context_buckets=context_buckets,
            token_buckets=token_buckets,
        ),
        weights=model.weights,
        compiler_flags=tuple(model.compiler.flags),
        options=model.options,
        name=model.name,
        description=model.description,
        profile_path=filename,
        build_index=index,
        matrix_values=dict(combo),
    )


class _LenientView:
    """Read raw profile values that have the expected type and passed schema validation."""

    def __init__(self, raw: Mapping[str, Any], failed: set[tuple[Any, ...]]) -> None:
        self._raw = raw
        self._failed = failed

    def get(self, path: tuple[str, ...], kind: type | tuple[type, ...], default: Any = None) -> Any:
        if any(path[: len(f)] == f for f in self._failed):
            return None
        node: Any = self._raw
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        if isinstance(node, bool) and kind is int:
            return None
        return node if isinstance(node, kind) else None


def _is_union_branch(part: Any) -> bool:
    return isinstance(part, str) and part.startswith(("list[", "literal[", "function-", "constrained-"))


def _raw_at(raw: Mapping[str, Any], loc: Sequence[Any]) -> Any:
    node: Any = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


_TYPE_WORDS = {
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "string_type": "a string",
    "list_type": "a list",
    "bool_type": "true or false",
    "float_type": "a number",
}


def _pydantic_message(error: Any) -> str:
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        known = _known_fields(loc[:-1])
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return f"unknown key '{key}'.{hint} Allowed: {', '.join(known)}"
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {error['input']!r}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"got {error['input']!r}; allowed: {expected}"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"must be an integer, got {error['input']!r}"
    if kind in {"greater_than_equal", "less_than_equal"}:
        return f"{error['msg'].lower()}, got {error['input']!r}"
    msg: str = error["msg"]
    if "input" in error and not isinstance(error["input"], dict | list):
        msg = f"{msg}, got {error['input']!r}"
    return msg


def _known_fields(loc: Sequence[Any]) -> list[str]:
    model: type[BaseModel] = ProfileModel
    for part in loc:
        annotation = model.model_fields.get(str(part))
        if annotation is None:
            return []
        candidate = annotation.annotation
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            model = candidate
        else:
            return []
    return list(model.model_fields)


def auto_buckets(minimum: int, maximum: int) -> tuple[int, ...]:
    """NxD Inference's generate_buckets: powers of two from 2^floor(log2 min) below 2^round(log2 max), then max."""
    import math

    if maximum <= minimum:
        return (maximum,)
    low = 2 ** math.floor(math.log2(minimum))
    high = 2 ** round(math.log2(maximum))
    buckets = []
    b = low
    while b < high:
        if b < maximum:
            buckets.append(b)
        b *= 2
    buckets.append(maximum)
    return tuple(sorted(set(buckets)))


def _check_semantics(
    view: _LenientView,
    filename: str,
    base_dir: Path | None,
    check_model_config: bool,
    problem: Any,
    warnings: list[str],
) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
    """Cross-field checks; returns (context buckets, token buckets, amp) when they resolve."""
    from neuronc.backends import backend_names, get_backend, unknown_backend_message

    max_length = view.get(("sequence", "max_length"), int)
    max_context = view.get(("sequence", "max_context_length"), int) or max_length
    if max_context is not None and max_length is not None and max_context > max_length:
        problem(("sequence", "max_context_length"), f"{max_context} is above sequence.max_length {max_length}")
    context_buckets = _resolve_buckets(
        view.get(("sequence", "context_buckets"), (list, str)),
        ("sequence", "context_buckets"),
        max_context,
        "max_context_length",
        problem,
    )
    token_buckets = _resolve_buckets(
        view.get(("sequence", "token_buckets"), (list, str)),
        ("sequence", "token_buckets"),
        max_length,
        "max_length",
        problem,
    )
    target = view.get(("target",), str)
    amp_given = view.get(("amp",), str)
    amp = amp_given or ("fp32" if target == "cpu" else "bf16")
    name = view.get(("backend",), str)
    tp = view.get(("tp_degree",), int)
    task = view.get(("model", "task"), str, default="text-generation")
    weights = view.get(("weights",), str, default="presharded")
    options = view.get(("options",), dict, default={}) or {}
    if name is None:
        return None
    if name not in backend_names():
        message, hint = unknown_backend_message(name)
        problem(("backend",), f"{message} ({hint})")
        return None
    backend = get_backend(name)
    if target is not None and target in TARGETS and target not in backend.targets:
        if target == "cpu":
            problem(
                ("target",),
                f"target 'cpu' needs the 'inductor' backend; '{name}' compiles for "
                f"{', '.join(sorted(backend.targets))}",
            )
        else:
            problem(
                ("target",),
                f"backend '{name}' does not compile for '{target}'; it supports {', '.join(sorted(backend.targets))}",
            )
    if amp_given is not None and amp_given in AMP_TO_DTYPE and amp_given not in backend.amp:
        problem(("amp",), f"'{amp_given}' is not supported by '{name}'; allowed: {', '.join(sorted(backend.amp))}")
    if task is not None and task in TASKS and task not in backend.tasks:
        problem(
            ("model", "task"), f"'{task}' is not supported by '{name}'; allowed: {', '.join(sorted(backend.tasks))}"
        )
    if weights is not None and weights in WEIGHT_MODES and weights not in backend.weights_modes:
        problem(
            ("weights",),
            f"'{weights}' is not supported by '{name}'; allowed: {', '.join(sorted(backend.weights_modes))}",
        )
    degrees = backend.supported_tp_degrees(target, options) if target in backend.targets else None
    if tp is not None and degrees is not None and tp not in degrees:
        if name == "inductor":
            others = [n for n in backend_names() if n != "inductor"]
            message = (
                f"the inductor backend runs tp_degree 1 only; use one of {', '.join(others)} for tensor parallelism"
            )
        else:
            message = f"{tp} is not supported on {target} by '{name}'; allowed: {_ranges(degrees)}"
        problem(("tp_degree",), message)

    model_id = view.get(("model", "id"), str)
    revision = view.get(("model", "revision"), str)
    if check_model_config and model_id:
        config = read_local_model_config(model_id, revision, base_dir)
        if config is not None:
            _check_against_config(tp, max_length, config, backend.requires_tp_divides_heads, problem)
    if target in NEURON_TARGETS and model_id and revision is None and not _is_local(model_id, base_dir):
        warnings.append(
            f"{filename}: model.revision is not pinned; the config hash will use the revision resolved at compile time"
        )
    if context_buckets is None or token_buckets is None:
        return None
    return context_buckets, token_buckets, amp


def _ranges(values: Iterable[int]) -> str:
    ordered = sorted(values)
    if len(ordered) > 6 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]} to {ordered[-1]}"
    return ", ".join(str(v) for v in ordered)


def _resolve_buckets(
    value: list[int] | str | None,
    path: tuple[str, str],
    limit: int | None,
    limit_name: str,
    problem: Any,
) -> tuple[int, ...] | None:
    if limit is None:
        return None
    if value is None:
        return (limit,)
    if value == "auto":
        return auto_buckets(128, limit)
    if not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        return None
    ok = True
    for i, bucket in enumerate(value):
        if bucket > limit:
            problem((*path, i), f"bucket {bucket} is above sequence.{limit_name} {limit}")
            ok = False
    if len(set(value)) != len(value):
        dupes = sorted({b for b in value if value.count(b) > 1})
        problem(path, f"duplicated bucket(s): {', '.join(map(str, dupes))}")
        ok = False
    if value != sorted(value):
        problem(path, f"buckets must be sorted ascending, got {value}")
        ok = False
    if not value:
        problem(path, "must list at least one bucket (or be 'auto')")
        ok = False
    return tuple(value) if ok else None


def _is_local(model_id: str, base_dir: Path | None) -> bool:
    return local_model_dir(model_id, base_dir) is not None


def read_local_model_config(model_id: str, revision: str | None, base_dir: Path | None) -> dict[str, Any] | None:
    """The model's config.json from a local directory or the local Hugging Face cache; no network."""
    directory = local_model_dir(model_id, base_dir)
    config_path: Path | None = None
    if directory is not None:
        config_path = directory / "config.json"
    elif "/" in model_id and not model_id.startswith((".", "/")):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
        except Exception:  # an invalid repo id is simply "not cached"
            cached = None
        if isinstance(cached, str):
            config_path = Path(cached)
    if config_path is None or not config_path.is_file():
        return None
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _check_against_config(
    tp: int | None,
    max_length: int | None,
    config: Mapping[str, Any],
    requires_divisible_heads: bool,
    problem: Any,
) -> None:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, Mapping)
    heads = text.get("num_attention_heads") or text.get("n_head")
    if requires_divisible_heads and tp and isinstance(heads, int) and heads % tp:
        problem(
            ("tp_degree",),
            f"{tp} does not divide the model's {heads} attention heads (config.json num_attention_heads)",
        )
    limit = text.get("max_position_embeddings") or text.get("n_positions")
    if isinstance(limit, int) and max_length is not None and max_length > limit:
        problem(
            ("sequence", "max_length"),
            f"{max_length} is above the model's max_position_embeddings {limit}",
        )


def profile_json_schema() -> dict[str, Any]:
    """JSON Schema of profiles, for editors (yaml-language-server) and `neuronc schema`."""
    schema = ProfileModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "neuronc compile profile"
    return schema
