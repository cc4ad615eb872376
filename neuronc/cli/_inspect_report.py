"""The reports of `neuronc inspect` and `neuronc verify`: what their checks add to the bundle's summary.

TypedDicts over the library's typed reports (VerifyJSON, VerdictJSON, SignatureJSON, AccuracyJSON),
and the shape of a check `verify` can run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict, TypeVar, final

from neuronc.errors import NeuroncError

if TYPE_CHECKING:
    from neuronc.accuracy import AccuracyJSON
    from neuronc.bundle import Manifest, PackageDifferenceJSON, VerifyJSON
    from neuronc.bundle.signing import SignatureJSON
    from neuronc.verdict import VerdictJSON

# Extra checks `verify` can run after integrity: the signature, the verdict against an image, accuracy
# against the reference model. A check takes (bundle_dir, manifest) and returns its report, stored
# under its name, with the failure it found (None if it passed); it raises a NeuroncError to fail with
# no report. To add one to `verify`, declare its option on verify_command, its report in Checks, and
# pass it to _run_checks.
R = TypeVar("R")
VerifyCheck = Callable[[Path, "Manifest"], tuple[R, NeuroncError | None]]


@final  # final: `"skipped" in report` tells it from a check's report (mypy narrows on it)
class Skipped(TypedDict):
    """A check not run: why."""

    skipped: str


class EnvironmentJSON(TypedDict):
    """``environment``: the bundle's toolchain against this environment's (ToolchainJSON, and more)."""

    verdict: str
    bundle_toolchain_key: str
    installed_toolchain_key: str | None
    differences: list[PackageDifferenceJSON]
    neuron_sdk: NotRequired[dict[str, str | None]]
    hint: NotRequired[str]


class Checks(TypedDict, total=False):
    """What the checks add to the report of `inspect` and `verify`, each only when it ran."""

    verify: VerifyJSON
    environment: EnvironmentJSON
    verdict: VerdictJSON | Skipped
    signature: SignatureJSON | Skipped
    accuracy: AccuracyJSON | Skipped


class VerifyDocument(Checks):
    """`neuronc verify --json`: the bundle, whether every check passed, each check's report."""

    bundle: str
    config_hash: str
    ok: NotRequired[bool]  # always there; a remote bundle's report says it last


__all__ = ["Checks", "EnvironmentJSON", "Skipped", "VerifyCheck", "VerifyDocument"]
