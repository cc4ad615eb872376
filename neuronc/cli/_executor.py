"""`--executor` and the Ray options `compile` and `plan` share, and turning them into settings."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc.cli import _cli as cli

if TYPE_CHECKING:
    from neuronc.cli._report import JSONObject
    from neuronc.pipeline.farm import RaySettings


class ExecutorName(StrEnum):
    LOCAL = "local"
    RAY = "ray"


ExecutorOpt = Annotated[
    ExecutorName,
    cli.Option(
        "--executor",
        help="local: this process (graphs of all builds share one pool within the pre-flight's memory); "
        "ray: one Ray task per build on a cluster, placed by the pre-flight's host RAM.",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    cli.Option(
        "--ray-address",
        metavar="ADDRESS",
        help="The Ray cluster (ray://head:10001, head:6379, auto). Default: $RAY_ADDRESS.",
    ),
]
RayResourcesOpt = Annotated[
    list[str] | None,
    cli.Option(
        "--ray-resources",
        metavar="NAME=AMOUNT",
        help="A custom Ray resource every build asks for (a node label for the SDK release, neuron_cores=32); "
        "repeatable, or comma-separated.",
    ),
]
RayRuntimeEnvOpt = Annotated[
    str | None,
    cli.Option(
        "--ray-runtime-env",
        metavar="JSON|FILE",
        help='Ray runtime_env for the workers (JSON, or a .json/.yaml file), e.g. \'{"pip": ["neuronc[cpu]"]}\'.',
    ),
]
RaySharedStoreOpt = Annotated[
    bool,
    cli.Option(
        "--ray-shared-store",
        help="The --store directory is mounted at the same path on every node (checked before submitting).",
    ),
]
RayRetriesOpt = Annotated[
    int | None,
    cli.Option("--ray-retries", min=0, help="Retries of a build whose node dies mid-build. Default: 2."),
]
RayConnectTimeoutOpt = Annotated[
    float | None,
    cli.Option(
        "--ray-connect-timeout",
        min=1,
        max=3600,
        metavar="SECONDS",
        help="How long connecting to the cluster may take before the run ends (exit 5). Default: 60.",
    ),
]
DEFAULT_RETRIES = 2
# Ray's own resources (and its per-node ``node:<ip>`` labels): a build may not ask for them by name.
_RESERVED_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
# A custom resource's name: what Ray accepts and a YAML/JSON reader sees unchanged (no space, '=' or ',').
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}")


def refuse_ray_options_without_ray(executor: ExecutorName, given: Mapping[str, object]) -> None:
    """Ray options mean nothing to ``--executor local``: refuse them (exit 2) instead of ignoring them."""
    if executor == ExecutorName.RAY:
        return
    named = [flag for flag, value in given.items() if value not in (None, False, [])]
    if named:
        msg = f"{', '.join(named)} only apply with --executor ray"
        raise cli.BadParameter(msg + "; add --executor ray, or drop them", param_hint=named[0])


def parse_resources(values: list[str] | None) -> dict[str, float]:
    """``["neuron_cores=32", "sdk_2_26=1,fast=0.5"]`` → ``{"neuron_cores": 32.0, ...}``.

    Names are stripped and must be custom resources (not CPU, GPU, memory, object_store_memory or a
    ``node:`` label, whatever spaces surround them); amounts are finite and not negative.
    """
    found: dict[str, float] = {}
    for value in values or []:
        for item in value.split(","):
            raw_name, sep, amount = item.partition("=")
            name = raw_name.strip()
            problem = None
            try:
                number = float(amount.strip()) if sep else 1.0
            except ValueError:
                number, problem = math.nan, f"{amount.strip()!r} is not a number"
            if not name:
                problem = "no resource name"
            elif name in _RESERVED_RESOURCES or name.startswith("node:"):
                problem = f"{name} is Ray's own resource (set by --jobs and the pre-flight's memory), not a custom one"
            elif not _RESOURCE_NAME.fullmatch(name):
                problem = f"{name!r} is not a resource name (letters, digits, _ . : / -)"
            elif problem is None and not (math.isfinite(number) and number >= 0):
                problem = f"{amount.strip()!r} is not a finite amount of at least 0"
            if problem is not None:
                msg = f"{item!r}: {problem}; give NAME=AMOUNT with a custom resource name"
                raise cli.BadParameter(msg, param_hint="--ray-resources")
            if name in found:
                raise cli.BadParameter(f"{name} is given twice", param_hint="--ray-resources")
            found[name] = number
    return found


def parse_runtime_env(value: str | None) -> JSONObject | None:
    """A runtime_env from JSON text or a JSON/YAML file (YAML read safely: no ``!!python`` tags).

    A file that cannot be parsed is exit 2 naming ``file:line:column``.
    """
    if value is None:
        return None
    text = value
    path = Path(value)
    where = "the JSON text"
    if not value.lstrip().startswith("{") and path.is_file():
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise cli.BadParameter(f"{path}: cannot read it: {exc}", param_hint="--ray-runtime-env") from None
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        data = _load_yaml(text, where)
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            line = f":{exc.lineno}:{exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            msg = f"{where}{line}: not JSON or a JSON/YAML file: {exc}"
            raise cli.BadParameter(msg, param_hint="--ray-runtime-env") from None
    if not isinstance(data, dict):
        raise cli.BadParameter(f"{where}: a runtime_env is a JSON object", param_hint="--ray-runtime-env")
    return data


def _load_yaml(text: str, where: str) -> object:
    """``yaml.safe_load``; a syntax error or an unsafe tag (``!!python/object``) is exit 2 at file:line:col."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise cli.BadParameter(f"{where}{at}: not valid YAML: {problem}", param_hint="--ray-runtime-env") from None


def ray_settings(
    *,
    address: str | None,
    resources: list[str] | None,
    runtime_env: str | None,
    shared_store: bool,
    retries: int | None,
    jobs: int | None,
    connect_timeout: float | None = None,
) -> RaySettings:
    from neuronc.pipeline.farm import RaySettings

    return RaySettings(
        address=address,
        resources=parse_resources(resources),
        runtime_env=parse_runtime_env(runtime_env),
        cpus=jobs,
        shared_store=shared_store,
        max_retries=DEFAULT_RETRIES if retries is None else retries,
        **({} if connect_timeout is None else {"connect_timeout_seconds": connect_timeout}),
    )


__all__ = [
    "ExecutorName",
    "ExecutorOpt",
    "RayAddressOpt",
    "RayConnectTimeoutOpt",
    "RayResourcesOpt",
    "RayRetriesOpt",
    "RayRuntimeEnvOpt",
    "RaySharedStoreOpt",
    "parse_resources",
    "parse_runtime_env",
    "ray_settings",
    "refuse_ray_options_without_ray",
]
