"""Cross-field checks of one build: buckets against lengths, and everything the backend has a say in.

The backend is asked, never named: its targets, dtypes, tasks, weights modes and tensor-parallel
degrees; whether it takes compiler flags; its ``options`` model (typos get positions and "did you
mean" like every other field); and, once the build is resolved, its own ``check_spec``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from neuronc.backends.base import Backend
from neuronc.keys import CompilerFlagsMode
from neuronc.profile._schema import pydantic_message
from neuronc.spec import AMP_TO_DTYPE, NEURON_TARGETS, TARGETS, TASKS, WEIGHT_MODES

Problem = Callable[[Sequence[Any], str], None]


class LenientView:
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


def auto_buckets(minimum: int, maximum: int) -> tuple[int, ...]:
    """NxD Inference's generate_buckets: powers of two from 2^floor(log2 min) below 2^round(log2 max), then max."""
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


def resolve_buckets(
    value: list[int] | str | None,
    path: tuple[str, str],
    limit: int | None,
    limit_name: str,
    problem: Problem,
) -> tuple[int, ...] | None:
    """Buckets as the build uses them ("auto" expanded, default: the limit itself); None if invalid."""
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


def check_sequence(view: LenientView, problem: Problem) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """max_context_length within max_length; the context and token buckets, resolved."""
    max_length = view.get(("sequence", "max_length"), int)
    max_context = view.get(("sequence", "max_context_length"), int) or max_length
    if max_context is not None and max_length is not None and max_context > max_length:
        problem(("sequence", "max_context_length"), f"{max_context} is above sequence.max_length {max_length}")
    context = resolve_buckets(
        view.get(("sequence", "context_buckets"), (list, str)),
        ("sequence", "context_buckets"),
        max_context,
        "max_context_length",
        problem,
    )
    token = resolve_buckets(
        view.get(("sequence", "token_buckets"), (list, str)),
        ("sequence", "token_buckets"),
        max_length,
        "max_length",
        problem,
    )
    return context, token


def check_backend_fields(view: LenientView, backend: Backend, problem: Problem) -> None:
    """Target, amp, task, weights, tp degree, compiler flags and options, as the backend allows them."""
    name = backend.name
    target = view.get(("target",), str)
    amp = view.get(("amp",), str)
    task = view.get(("model", "task"), str, default="text-generation")
    weights = view.get(("weights",), str, default=backend.rules.default_weights)
    tp = view.get(("tp_degree",), int)
    options = view.get(("options",), dict, default={}) or {}
    if target is not None and target in TARGETS:
        # The support matrix (Neuron backends) names the last release that supported the pair.
        found = list(backend.rules.support_problems(target, view.get(("sdk",), str)))
        if target not in backend.targets and not found:
            problem(("target",), _target_problem(target, backend))
        for each in found:
            problem(each.path, each.message)
        check_lnc(options, backend, problem)
    for path, value, universe, supported in (
        (("amp",), amp, AMP_TO_DTYPE, backend.rules.amp),
        (("model", "task"), task, TASKS, backend.rules.tasks),
        (("weights",), weights, WEIGHT_MODES, backend.rules.weights_modes),
    ):
        if value is not None and value in universe and value not in supported:
            problem(path, f"'{value}' is not supported by '{name}'; allowed: {', '.join(sorted(supported))}")
    degrees = backend.rules.supported_tp_degrees(target, options) if target in backend.targets else None
    if tp is not None and degrees is not None and tp not in degrees:
        problem(("tp_degree",), backend.rules.tp_degree_problem(tp, target, degrees))
    flags = view.get(("compiler", "flags"), list)
    if flags and backend.toolchain.compiler_flags_mode is CompilerFlagsMode.NONE:
        problem(("compiler", "flags"), backend.rules.compiler_flags_problem())
    check_options(options, backend, problem)


def check_lnc(options: Mapping[str, Any], backend: Backend, problem: Problem) -> None:
    """``options.logical_nc_config`` against the LNC values the support matrix gives the backend."""
    from neuronc.backends.support import lnc_problem
    from neuronc.hardware import LNC_OPTION

    value = options.get(LNC_OPTION)
    if isinstance(value, int) and not isinstance(value, bool):
        found = lnc_problem(backend.name, value)
        if found is not None:
            problem(("options", LNC_OPTION), found)


def _target_problem(target: str, backend: Backend) -> str:
    from neuronc.backends import backends_compiling_for

    allowed = ", ".join(sorted(backend.targets))
    able = [n for n in backends_compiling_for(target) if n != backend.name]
    if len(able) == 1:
        return f"target '{target}' needs the '{able[0]}' backend; '{backend.name}' compiles for {allowed}"
    if able:
        return f"target '{target}' needs one of the backends {', '.join(able)}; '{backend.name}' compiles for {allowed}"
    return f"backend '{backend.name}' does not compile for '{target}'; it supports {allowed}"


def check_options(options: Mapping[str, Any], backend: Backend, problem: Problem) -> None:
    """Validate ``options:`` against the backend's options model, each error at its own position."""
    model = backend.rules.options_model
    if model is None:
        return
    try:
        model.model_validate(dict(options))
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            problem(("options", *loc), pydantic_message(error, model))


def check_against_config(
    tp: int | None,
    max_length: int | None,
    config: Mapping[str, Any],
    requires_divisible_heads: bool,
    problem: Problem,
) -> None:
    """tp against the model's attention heads; max_length against its position embeddings."""
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config
    heads = text.get("num_attention_heads") or text.get("n_head")
    if requires_divisible_heads and tp and isinstance(heads, int) and not isinstance(heads, bool) and heads % tp:
        problem(
            ("tp_degree",),
            f"{tp} does not divide the model's {heads} attention heads (config.json num_attention_heads)",
        )
    limit = text.get("max_position_embeddings") or text.get("n_positions")
    if isinstance(limit, int) and not isinstance(limit, bool) and max_length is not None and max_length > limit:
        problem(("sequence", "max_length"), f"{max_length} is above the model's max_position_embeddings {limit}")


def check_model(
    view: LenientView,
    backend: Backend,
    filename: str,
    base_dir: Path | None,
    check_model_config: bool,
    problem: Problem,
    warnings: list[str],
) -> None:
    """Checks against the model's config.json when it is on this machine; warn on an unpinned revision."""
    from neuronc.model.files import find_model_config, local_model_dir

    model_id = view.get(("model", "id"), str)
    revision = view.get(("model", "revision"), str)
    if not model_id:
        return
    if check_model_config:
        config = find_model_config(model_id, revision, base_dir)
        if config is not None:
            tp = view.get(("tp_degree",), int)
            max_length = view.get(("sequence", "max_length"), int)
            check_against_config(tp, max_length, config, backend.rules.requires_tp_divides_heads, problem)
    target = view.get(("target",), str)
    if target in NEURON_TARGETS and revision is None and local_model_dir(model_id, base_dir) is None:
        warnings.append(
            f"{filename}: model.revision is not pinned; the config hash will use the revision resolved at compile time"
        )
