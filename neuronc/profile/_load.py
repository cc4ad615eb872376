"""Loading a profile file: read it safely, parse YAML with positions, validate each matrix build."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from neuronc.build import Build
from neuronc.errors import InvalidInputError, ProfileError
from neuronc.profile._checks import LenientView, check_backend_fields, check_model, check_sequence
from neuronc.profile._matrix import apply_combo, check_matrix_shape, matrix_combinations
from neuronc.profile._schema import ProfileModel, is_union_branch, pydantic_message, raw_at
from neuronc.profile._yaml import TooLarge, YamlTree, format_path
from neuronc.spec import BuildSpec, ModelSection, ResolvedSequence

MAX_PROFILE_BYTES = 256 * 1024
# Profiles neuronc itself wrote from command-line flags (`compile --model ...`, a temporary file):
# their path -> how the build is named (``BuildSpec.shown_as``): the flags, not a file the user never saw.
_SHOWN_AS: dict[str, str] = {}
SCHEMA_HINT = "see docs/profiles.md, or run `neuronc schema` for the JSON Schema your editor can check against"


@dataclass
class LoadedProfile:
    path: Path
    text: str
    builds: list[Build]
    warnings: list[str] = field(default_factory=list)

    @property
    def specs(self) -> list[BuildSpec]:
        """The builds' specs (what reading a profile's fields needs)."""
        return [build.spec for build in self.builds]


def show_profile_as(path: str | os.PathLike[str], label: str | None) -> None:
    """Name the builds of the profile at ``path`` ``label`` in reports and messages (None: forget it)."""
    if label is None:
        _SHOWN_AS.pop(os.fspath(path), None)
    else:
        _SHOWN_AS[os.fspath(path)] = label


def load_profile(path: str | os.PathLike[str], *, check_model_config: bool = True) -> LoadedProfile:
    """Load, validate and expand a profile file; raise ProfileError listing every problem."""
    from neuronc.fsutil import read_bytes_limited

    p = Path(path)
    display = str(path)
    if p.is_dir():
        raise ProfileError(f"{display}: is a directory, not a profile")
    try:
        raw = read_bytes_limited(p, MAX_PROFILE_BYTES, what="profile")
    except FileNotFoundError:
        msg = f"{display}: no such profile"
        raise ProfileError(msg, hint="pass the path of a YAML profile, e.g. profiles/tiny-llama-cpu.yaml") from None
    except InvalidInputError as exc:  # too large, or a FIFO, device or socket
        raise ProfileError(exc.message) from None
    except OSError as exc:
        raise ProfileError(f"{display}: cannot read profile: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{display}: not UTF-8 text (byte {exc.start})") from None
    loaded = parse_profile(text, display, base_dir=p.parent, check_model_config=check_model_config)
    shown_as = _SHOWN_AS.get(os.fspath(path))
    if shown_as is not None:
        loaded.builds = [b.with_spec(b.spec.model_copy(update={"shown_as": shown_as})) for b in loaded.builds]
    return loaded


def parse_profile(
    text: str,
    filename: str = "<profile>",
    *,
    base_dir: Path | None = None,
    check_model_config: bool = True,
) -> LoadedProfile:
    """Validate profile text; ``base_dir`` resolves relative local model paths."""
    tree = YamlTree(filename)
    data = _load_yaml(tree, text, filename)
    problems = list(tree.problems)
    if not isinstance(data, dict):
        if data is not None or not problems:
            kind = "empty" if data is None else f"a {type(data).__name__}"
            problems.append(f"{filename}:1:1: <root>: a profile is a mapping of fields, but this file is {kind}")
        raise ProfileError(f"{filename}: invalid profile", details=problems, hint=SCHEMA_HINT)

    builds: list[Build] = []
    warnings: list[str] = []
    matrix_problems = check_matrix_shape(data.get("matrix"), tree)
    problems.extend(matrix_problems)
    combos = [{}] if matrix_problems else matrix_combinations(data.get("matrix") or {})
    per_build: list[list[str]] = []
    for index, combo in enumerate(combos):
        build_problems: list[str] = []
        build = _build_one(data, combo, index, tree, base_dir, check_model_config, build_problems, warnings)
        per_build.append(build_problems)
        if build is not None:
            builds.append(build)
    problems.extend(_merge_build_problems(per_build, len(combos)))
    if problems:
        problems.sort(key=_problem_position)
        count = len(problems)
        msg = f"{filename}: {count} problem{'s' if count != 1 else ''} in profile"
        raise ProfileError(msg, details=problems, hint=SCHEMA_HINT)
    return LoadedProfile(path=Path(filename), text=text, builds=builds, warnings=sorted(set(warnings)))


def _load_yaml(tree: YamlTree, text: str, filename: str) -> Any:
    try:
        return tree.load(text)
    except TooLarge as exc:
        raise ProfileError(f"{filename}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        what = exc.problem or exc.context or "invalid YAML"
        if "could not determine a constructor" in str(exc):
            what = f"{what} (only plain YAML is allowed: no tags such as !!python/object)"
        raise ProfileError(f"{where}: invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{filename}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{filename}: YAML nested too deeply") from None


def _merge_build_problems(per_build: list[list[str]], builds: int) -> list[str]:
    """A problem every build shares is reported once; one that only some builds have names them."""
    builds_with: dict[str, list[int]] = {}
    for index, build_problems in enumerate(per_build):
        for problem in build_problems:
            builds_with.setdefault(problem, []).append(index)
    merged = []
    for problem, indices in builds_with.items():
        if len(indices) < builds:
            problem = f"{problem} (matrix build{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))})"
        merged.append(problem)
    return merged


def _problem_position(problem: str) -> tuple[int, int]:
    parts = problem.split(":")
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return (0, 0)


def _build_one(
    data: Mapping[str, Any],
    combo: Mapping[str, Any],
    index: int,
    tree: YamlTree,
    base_dir: Path | None,
    check_model_config: bool,
    problems: list[str],
    warnings: list[str],
) -> Build | None:
    from neuronc.backends import get_backend, is_registered, unknown_backend_message

    filename = tree.filename
    raw = apply_combo(data, combo)
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

    model, failed = _validate_schema(raw, tree, problem)
    # Semantic checks run on every field that is well-typed, even when others are not, so a user
    # sees every problem in one pass.
    view = LenientView(raw, failed)
    count_before = len(problems)
    context_buckets, token_buckets = check_sequence(view, problem)
    name = view.get(("backend",), str)
    if name is None:
        return None
    if not is_registered(name):
        message, hint = unknown_backend_message(name)
        problem(("backend",), f"{message} ({hint})")
        return None
    backend = get_backend(name)  # the build's one backend look-up: the Build carries it down
    check_backend_fields(view, backend, problem)
    check_model(view, backend, filename, base_dir, check_model_config, problem, warnings)
    if model is None or context_buckets is None or token_buckets is None or len(problems) > count_before:
        return None
    seq = model.sequence
    target = model.target
    spec = BuildSpec(
        model=_resolved_model(model.model, base_dir),
        backend=model.backend,
        target=target,
        tp_degree=model.tp_degree,
        batch_size=model.batch_size,
        amp=model.amp or ("fp32" if target == "cpu" else "bf16"),
        sequence=ResolvedSequence(
            max_length=seq.max_length,
            max_context_length=seq.max_context_length or seq.max_length,
            context_buckets=context_buckets,
            token_buckets=token_buckets,
        ),
        weights=model.weights or backend.rules.default_weights,
        compiler_flags=tuple(model.compiler.flags),
        options=model.options,
        sdk=model.sdk,
        name=model.name,
        description=model.description,
        profile_path=filename,
        build_index=index,
        matrix_values=dict(combo),
    )
    for found in backend.rules.check_spec(spec):
        problem(found.path, found.message)
    return None if len(problems) > count_before else Build(spec, backend)


def _resolved_model(model: ModelSection, base_dir: Path | None) -> ModelSection:
    """``model`` with a local directory made absolute, once, here: relative to the profile's
    directory as the checks above read it. Every later reader (the keys, a Neuron backend's
    isolated compile in its own work directory, an export's ``checkpoint_id``, a Ray task on
    another node) then sees the same directory whatever its working directory is; a Hub id stays as
    written."""
    from neuronc.model.files import local_model_dir

    directory = local_model_dir(model.id, base_dir)
    if directory is None or model.id == str(directory):
        return model
    return model.model_copy(update={"id": str(directory)})


def _validate_schema(
    raw: Mapping[str, Any], tree: YamlTree, problem: Any
) -> tuple[ProfileModel | None, set[tuple[Any, ...]]]:
    """The profile model, or None and every schema error reported (each once, at its field)."""
    failed: set[tuple[Any, ...]] = set()
    try:
        return ProfileModel.model_validate(raw), failed
    except ValidationError as exc:
        reported: set[tuple[Any, ...]] = set()
        for error in exc.errors():
            loc = tuple(error["loc"])
            branch = next((i for i, part in enumerate(loc) if is_union_branch(part)), None)
            if branch is not None:
                loc = loc[:branch]
            failed.add(loc)
            if loc in reported or (tree.is_refused(loc) and error["type"] != "extra_forbidden"):
                continue  # a union is reported once; a value behind a refused YAML tag already was
            reported.add(loc)
            if branch is not None:
                problem(loc, f"must be a list of positive integers or 'auto', got {raw_at(raw, loc)!r}")
            else:
                problem(loc, pydantic_message(error))
    return None, failed


def expand_profile_paths(arguments: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Profile files from command-line arguments: a directory stands for its *.yaml and *.yml files (sorted)."""
    paths: list[str] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            if not found:
                raise InvalidInputError(f"{argument}: directory has no *.yaml profiles")
            paths.extend(str(p) for p in found)
        else:
            paths.append(str(argument))
    return list(dict.fromkeys(paths))


def load_builds(paths: Sequence[str | os.PathLike[str]]) -> list[Build]:
    """Load and validate every profile first, so bad input fails before any work starts.

    Raises one ProfileError naming every problem in every file.
    """
    builds: list[Build] = []
    failures: list[ProfileError] = []
    for path in paths:
        try:
            builds.extend(load_profile(path).builds)
        except ProfileError as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        details = [line for exc in failures for line in (exc.details or [exc.message])]
        msg = f"{len(failures)} of {len(paths)} profiles are invalid"
        raise ProfileError(msg, details=details, hint=failures[0].hint)
    return builds
