"""`--executor` and the Ray options `compile` and `plan` share, and turning them into settings."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from neuronc.cli import _cli as cli

if TYPE_CHECKING:
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
    int,
    cli.Option("--ray-retries", min=0, help="Retries of a build whose node dies mid-build."),
]


def parse_resources(values: list[str] | None) -> dict[str, float]:
    """``["neuron_cores=32", "sdk_2_26=1,fast=0.5"]`` → ``{"neuron_cores": 32.0, ...}``."""
    found: dict[str, float] = {}
    for value in values or []:
        for item in value.split(","):
            name, sep, amount = item.strip().partition("=")
            try:
                number = float(amount) if sep else 1.0
            except ValueError:
                number = -1.0
            if not name or number <= 0 or name in {"CPU", "GPU", "memory"}:
                msg = f"{item!r}: give NAME=AMOUNT with a custom resource name and a positive amount"
                raise cli.BadParameter(msg, param_hint="--ray-resources")
            found[name.strip()] = number
    return found


def parse_runtime_env(value: str | None) -> dict[str, Any] | None:
    """A runtime_env from JSON text or a JSON/YAML file."""
    if value is None:
        return None
    text = value
    path = Path(value)
    if not value.lstrip().startswith("{") and path.is_file():
        text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in {".yaml", ".yml"} and path.is_file():
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, OSError) as exc:
        raise cli.BadParameter(f"not JSON or a JSON/YAML file: {exc}", param_hint="--ray-runtime-env") from None
    if not isinstance(data, dict):
        raise cli.BadParameter("a runtime_env is a JSON object", param_hint="--ray-runtime-env")
    return data


def ray_settings(
    *,
    address: str | None,
    resources: list[str] | None,
    runtime_env: str | None,
    shared_store: bool,
    retries: int,
    jobs: int | None,
) -> RaySettings:
    from neuronc.pipeline.farm import RaySettings

    return RaySettings(
        address=address,
        resources=parse_resources(resources),
        runtime_env=parse_runtime_env(runtime_env),
        cpus=jobs,
        shared_store=shared_store,
        max_retries=retries,
    )


__all__ = [
    "ExecutorName",
    "ExecutorOpt",
    "RayAddressOpt",
    "RayResourcesOpt",
    "RayRetriesOpt",
    "RayRuntimeEnvOpt",
    "RaySharedStoreOpt",
    "parse_resources",
    "parse_runtime_env",
    "ray_settings",
]
