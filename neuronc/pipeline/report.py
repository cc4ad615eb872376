"""What a compile run reports: one ``BuildReport`` per build, its stages, and the run's exit code.

The JSON these produce (``to_json``, ``run_report``) is the stable record ``neuronc compile --json``
prints and ``--report FILE`` writes (docs/compile.md); Python callers get the typed objects, and a
failed report keeps the original exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import (
    EXIT_COMPILE_FAILED,
    EXIT_ENVIRONMENT,
    EXIT_INTERRUPTED,
    EXIT_INVALID_INPUT,
    EXIT_MISS,
    EXIT_OK,
    EXIT_UNEXPECTED,
    EXIT_VERIFICATION_FAILED,
    NeuroncError,
)
from neuronc.jsonfile import JsonFields
from neuronc.spec import BuildSpec

if TYPE_CHECKING:
    from neuronc.bundle import Graph, Stage
    from neuronc.bundle.signing import BuiltSignatureJSON

REPORT_SCHEMA_VERSION = 1

# Most severe first: the exit code of a run with several builds is the first of these that occurs.
# An interruption or an environment problem stops the run; a bug (1) outranks an ordinary failure.
_SEVERITY = (
    EXIT_INTERRUPTED,
    EXIT_ENVIRONMENT,
    EXIT_UNEXPECTED,
    EXIT_COMPILE_FAILED,
    EXIT_VERIFICATION_FAILED,
    EXIT_INVALID_INPUT,
    EXIT_MISS,
    EXIT_OK,
)


class BuildStatus(StrEnum):
    """What happened to one build."""

    BUILT = "built"
    HIT = "hit"
    # Compiled graphs taken from a stored bundle with the same graphs key; only the weights staged.
    REBOUND = "rebound"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class StageReport:
    """Wall time and peak memory of one pipeline stage."""

    name: str
    seconds: float
    # Peak resident set of this process during the stage (None where the OS does not tell).
    peak_rss_bytes: int | None = None
    # Largest peak of a child process (parallel graph compiles) that ended during the stage.
    children_peak_rss_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wall_seconds": round(self.seconds, 4),
            "peak_rss_bytes": self.peak_rss_bytes,
            "children_peak_rss_bytes": self.children_peak_rss_bytes,
        }

    def to_manifest(self) -> Stage:
        """The manifest's stage record: peak RSS of this process or any child, whichever is larger."""
        from neuronc.bundle import Stage

        peaks = [v for v in (self.peak_rss_bytes, self.children_peak_rss_bytes) if v is not None]
        return Stage(name=self.name, wall_seconds=round(self.seconds, 4), peak_rss_bytes=max(peaks) if peaks else None)


@dataclass(frozen=True)
class NearestBundle(JsonFields):
    """On a miss: the store's bundle of the same model and backend with the fewest differing hashed fields."""

    config_hash: str
    toolchain_key: str
    bundle: str
    # [{"field", "a", "b"}] as ``neuronc.keys.diff_inputs`` gives them; a: the bundle's, b: this build's.
    differences: list[dict[str, Any]]
    # {package: {"a", "b"}} for the toolchain versions that differ.
    toolchain_differences: dict[str, dict[str, str | None]]


class SignatureOutcome(StrEnum):
    """What the signing stage (``neuronc.pipeline.sign``) did to one build's bundle."""

    # Built (or rebound) here: signed.
    SIGNED = "signed"
    # A store hit whose own signature verifies as the signer's: kept.
    KEPT = "kept"
    # A store hit not provably the signer's: left unsigned (``why``).
    REFUSED = "refused"
    # Signing failed (``error``); the stage stopped there.
    FAILED = "failed"


@dataclass(frozen=True)
class BuildSignature:
    """The signing stage's result for one build (``BuildReport.signature``; None when nothing signed it)."""

    outcome: SignatureOutcome
    # The bundle signed or checked (a local copy for a bundle a Ray node built).
    bundle: str | None = None
    signer: str | None = None
    # What `compile --sign --json` lists under ``signatures`` (signed and kept).
    record: BuiltSignatureJSON | None = None
    # Why a store hit was left unsigned.
    why: str = ""
    error: NeuroncError | None = None


@dataclass
class BuildReport:
    """What happened to one build: its keys, hit/built/failed, where the bundle is, and what it cost."""

    profile: str
    build_index: int
    status: BuildStatus
    model: str = ""
    backend: str = ""
    target: str = ""
    name: str | None = None
    matrix: dict[str, Any] = field(default_factory=dict)
    config_hash: str | None = None
    toolchain_key: str | None = None
    toolchain_label: str | None = None
    bundle: str | None = None
    out: str | None = None
    # The bundle's graphs, as its manifest records them (a dict each only in ``to_json``).
    graphs: list[Graph] = field(default_factory=list)
    stages: list[StageReport] = field(default_factory=list)
    wall_seconds: float = 0.0
    exit_code: int = EXIT_OK
    # The error that failed the build, as raised (``raise_for_status`` raises it again).
    error: NeuroncError | None = None
    nearest: NearestBundle | None = None
    messages: list[str] = field(default_factory=list)
    # The graphs key and the weights key the bundle key is derived from (neuronc.keys).
    graphs_key: str | None = None
    weights_key: str | None = None
    # A rebound build: the stored bundle its graphs came from ({"config_hash", "toolchain_key", "bundle"}).
    rebound_from: dict[str, str] | None = None
    # What the signing stage did to the bundle (a run with a signer); not part of ``to_json``: the
    # run's document lists the signatures on their own (`compile --sign`).
    signature: BuildSignature | None = None

    @classmethod
    def for_spec(cls, spec: BuildSpec, status: BuildStatus, **fields: Any) -> BuildReport:
        """A report of ``spec`` with ``status`` and the other ``fields`` given."""
        return cls(
            profile=spec.shown_as or spec.profile_path or "<profile>",
            build_index=spec.build_index,
            status=status,
            model=spec.model.id,
            backend=spec.backend,
            target=str(spec.target),
            name=spec.name,
            matrix=dict(spec.matrix_values),
            **fields,
        )

    @classmethod
    def assemble(
        cls, spec: BuildSpec, *, status: BuildStatus, error: NeuroncError | None = None, **fields: Any
    ) -> BuildReport:
        """The report of a build that ended: ``error`` makes it failed, with that error's exit code."""
        if error is not None:
            return cls.for_spec(spec, BuildStatus.FAILED, exit_code=error.exit_code, error=error, **fields)
        return cls.for_spec(spec, status, **fields)

    @property
    def ok(self) -> bool:
        return self.status in (BuildStatus.BUILT, BuildStatus.HIT, BuildStatus.REBOUND)

    @property
    def peak_rss_bytes(self) -> int | None:
        """The largest peak resident set of any stage, this process or its children."""
        values = [v for s in self.stages for v in (s.peak_rss_bytes, s.children_peak_rss_bytes) if v is not None]
        return max(values) if values else None

    @property
    def label(self) -> str:
        """``profile.yaml`` or ``profile.yaml#2`` for matrix builds."""
        return f"{self.profile}#{self.build_index}" if self.matrix else self.profile

    def stage_seconds(self) -> dict[str, float]:
        return {s.name: round(s.seconds, 4) for s in self.stages}

    def to_json(self) -> dict[str, Any]:
        """The stable record printed by ``--json`` and written by ``--report`` (docs/compile.md)."""
        return {
            "profile": self.profile,
            "build_index": self.build_index,
            "name": self.name,
            "matrix": self.matrix,
            "model": self.model,
            "backend": self.backend,
            "target": self.target,
            "status": str(self.status),
            "exit_code": self.exit_code,
            "config_hash": self.config_hash,
            "graphs_key": self.graphs_key,
            "weights_key": self.weights_key,
            "rebound_from": self.rebound_from,
            "toolchain_key": self.toolchain_key,
            "toolchain_label": self.toolchain_label,
            "bundle": self.bundle,
            "out": self.out,
            "graphs": [g.model_dump() for g in self.graphs],
            "stages": [s.to_json() for s in self.stages],
            "stage_seconds": self.stage_seconds(),
            "peak_rss_bytes": self.peak_rss_bytes,
            "wall_seconds": round(self.wall_seconds, 4),
            "nearest": self.nearest.to_json() if self.nearest else None,
            "error": self.error.to_json() if self.error else None,
            "messages": self.messages,
        }

    def raise_for_status(self) -> None:
        """Raise the error that failed this build, or failed signing its bundle, as it was raised (for
        Python callers who prefer exceptions)."""
        if self.error is not None:
            raise self.error
        if self.signature is not None and self.signature.error is not None:
            raise self.signature.error


def hit_graphs(bundle: Path) -> list[Graph]:
    """A stored bundle's graphs, as its manifest lists them (what a hit reports)."""
    from neuronc.bundle import read_manifest

    return list(read_manifest(bundle).graphs)


def overall_exit_code(reports: Iterable[BuildReport]) -> int:
    """The most severe exit code among the reports (0 when every build is built or a hit)."""
    codes = {r.exit_code for r in reports}
    for code in _SEVERITY:
        if code in codes:
            return code
    return max(codes, default=EXIT_OK)


def run_report(
    reports: Sequence[BuildReport], *, interrupted: bool = False, error: NeuroncError | None = None
) -> dict[str, Any]:
    """The whole run as one JSON document (``--json`` and ``--report FILE``).

    ``error`` is a failure before or between builds (a bad profile, an unavailable backend): the
    document keeps its shape, with the builds that ran and a top-level ``error``.
    """
    counts = {str(s): 0 for s in BuildStatus}
    for r in reports:
        counts[str(r.status)] += 1
    if interrupted:
        exit_code = EXIT_INTERRUPTED
    elif error is not None:
        exit_code = error.exit_code
    else:
        exit_code = overall_exit_code(reports)
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "exit_code": exit_code,
        "interrupted": interrupted,
        "summary": counts,
        "builds": [r.to_json() for r in reports],
        "error": error.to_json() if error is not None else None,
    }
