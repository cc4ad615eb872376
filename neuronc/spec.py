"""What one build is: ``BuildSpec`` and its parts, fully resolved from a profile.

A leaf module: it imports nothing else from neuronc, so every layer (profiles, keys, backends, the
pipeline, deploy) may import it. ``neuronc.profile`` turns YAML into these objects; everything
downstream only reads them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

# Closed sets as Literal types: checked by mypy wherever they are compared, and plain strings at run
# time (a value lands in JSON, YAML and generated Python as the word it is).
# The hardware a build compiles for.
Target = Literal["inf2", "trn1", "trn2", "trn3", "cpu"]
# The dtype a build computes in, as profiles spell it.
Amp = Literal["fp32", "fp16", "bf16"]
# How a bundle carries its weights: tensor-parallel rank shards in weights/ (presharded), sharded from
# the bundled checkpoint when loaded (on-load), read from the original checkpoint when loaded (reference).
WeightsMode = Literal["presharded", "on-load", "reference"]


class ServingStack(StrEnum):
    """A serving stack that loads bundles (``Backend.serving_stacks``, ``neuronc deploy --for``)."""

    vllm = "vllm"
    tgi = "tgi"
    torchserve = "torchserve"
    sagemaker = "sagemaker"
    neuronc = "neuronc"  # `neuronc serve`, for CPU (inductor) bundles (deploy.neuronc_serve)


TARGETS: tuple[str, ...] = get_args(Target)
NEURON_TARGETS = tuple(t for t in TARGETS if t != "cpu")
AMP_TO_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
WEIGHT_MODES: tuple[str, ...] = get_args(WeightsMode)
TASKS = ("text-generation", "feature-extraction", "text-classification", "fill-mask", "token-classification")

PositiveInt = Annotated[int, Field(ge=1, le=1 << 20, strict=True)]


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors: the base of every profile and spec model."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(StrictModel):
    id: str = Field(min_length=1, description="Hugging Face Hub id, or a local directory")
    revision: str | None = Field(default=None, description="Hub revision (commit sha, tag or branch)")
    task: Literal[TASKS] = "text-generation"  # type: ignore[valid-type]


def served_model_name(model_id: str) -> str:
    """The name a server answers to for ``model_id``: a Hub id as it is; a local model directory by its own
    name, never the build host's path (a profile's local ``model.id`` is made absolute when it loads)."""
    if model_id.startswith(("/", "./", "../")) or model_id in (".", ".."):
        return model_id.rstrip("/").rsplit("/", 1)[-1].strip(".") or "model"
    return model_id


class ResolvedSequence(StrictModel):
    max_length: int
    max_context_length: int
    context_buckets: tuple[int, ...]
    token_buckets: tuple[int, ...]


class BuildSpec(StrictModel):
    """One fully resolved build: what a backend compiles into one bundle."""

    model: ModelSection
    # A name in the backend registry: an open set (third-party backends register their own), so a
    # string checked against the registry when the profile loads, not an enum.
    backend: str
    target: Target
    tp_degree: int
    batch_size: int
    amp: Amp
    sequence: ResolvedSequence
    weights: WeightsMode
    compiler_flags: tuple[str, ...]
    options: dict[str, Any]
    # Not part of the config hash: the Neuron SDK release the build asks for selects its toolchain,
    # and the toolchain key covers the versions (docs/keys.md).
    sdk: str | None = None
    # Not part of the config hash:
    name: str | None = None
    description: str | None = None
    profile_path: str | None = None
    # How reports and messages name a build that no profile file of the user's holds (`compile --model
    # ...`: the flags; its profile is a temporary file): ``label`` uses it instead of ``profile_path``.
    shown_as: str | None = None
    build_index: int = 0
    matrix_values: dict[str, Any] = Field(default_factory=dict)

    @property
    def dtype(self) -> str:
        return AMP_TO_DTYPE[self.amp]

    @property
    def label(self) -> str:
        """``profile.yaml`` or ``profile.yaml#2`` for matrix builds: how reports name a build."""
        profile = self.shown_as or self.profile_path or "<profile>"
        return f"{profile}#{self.build_index}" if self.matrix_values else profile

    def normalized(self) -> dict[str, Any]:
        """The compile-relevant profile, normalised (what manifests and `validate` show)."""
        return self.model_dump(
            mode="json", exclude={"name", "description", "profile_path", "shown_as", "build_index", "matrix_values"}
        )


__all__ = [
    "AMP_TO_DTYPE",
    "NEURON_TARGETS",
    "TARGETS",
    "TASKS",
    "WEIGHT_MODES",
    "Amp",
    "BuildSpec",
    "ModelSection",
    "PositiveInt",
    "ResolvedSequence",
    "ServingStack",
    "StrictModel",
    "Target",
    "WeightsMode",
]
