"""Pre-flight: will a build fit before an hour of compile is spent on it? (docs/ci.md, "Pre-flight")

``params`` counts parameters from config.json; ``estimate`` turns a build into device and host
memory numbers and refuses (``preflight``, exit 2) a build known not to fit its target.
"""

from neuronc.hardware import hbm_per_core
from neuronc.preflight.estimate import (
    GIB,
    Estimate,
    Fit,
    estimate,
    gib,
    host_ram_bytes,
    preflight,
    smallest_fitting_tp,
)
from neuronc.preflight.params import FAMILIES, ModelDims, model_dims

__all__ = [
    "FAMILIES",
    "GIB",
    "Estimate",
    "Fit",
    "ModelDims",
    "estimate",
    "gib",
    "hbm_per_core",
    "host_ram_bytes",
    "model_dims",
    "preflight",
    "smallest_fitting_tp",
]
