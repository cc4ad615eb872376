"""What differs between transformers 4.57.x (the Neuron SDK's series) and 5.x, in one place.

Nothing here imports transformers: the version comes from the package metadata, and config
conversions work on config.json dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import metadata
from typing import Any

from packaging.version import InvalidVersion, Version

# The series optimum-neuron 0.4.5 and the Neuron SDK pin.
SDK_SERIES = "4.57"


@cache
def transformers_version() -> Version | None:
    """The installed transformers version, or None when it is not installed."""
    try:
        return Version(metadata.version("transformers"))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return None


def transformers_is_sdk_series() -> bool:
    """Whether the installed transformers is the 4.57.x series that the Neuron SDK pins."""
    version = transformers_version()
    return version is not None and f"{version.major}.{version.minor}" == SDK_SERIES


def transformers_major() -> int | None:
    """The installed transformers' major version, or None when it is not installed."""
    version = transformers_version()
    return None if version is None else version.major


def legacy_rope_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """``rope_theta`` and ``rope_scaling`` as transformers 4.57 writes them, for a config.json from 5.x.

    transformers 5 writes one ``rope_parameters`` dict (``rope_type``, ``rope_theta`` and the scaling
    keys) where 4.57 wrote ``rope_theta`` and ``rope_scaling`` (None for default RoPE). Code pinned to
    4.57, such as NxD Inference's required ``rope_theta``, reads the old keys. Returns {} when the
    config already has ``rope_theta``, has no ``rope_parameters``, or has per-layer-type parameters
    (one dict per attention type), which have no 4.57 form.
    """
    params = config.get("rope_parameters")
    if "rope_theta" in config or not isinstance(params, Mapping) or "rope_theta" not in params:
        return {}
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if scaling.get("rope_type", "default") == "default" and set(scaling) <= {"rope_type"}:
        return {"rope_theta": params["rope_theta"], "rope_scaling": None}
    return {"rope_theta": params["rope_theta"], "rope_scaling": scaling}
