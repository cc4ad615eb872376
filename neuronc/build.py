"""Deprecated name of ``neuronc.pipeline`` (kept for one release: older docs and scripts import it)."""

from neuronc.pipeline import (
    BuildReport,
    BuildStatus,
    StageReport,
    build_one,
    check_backends,
    compile_profiles,
    copy_bundle,
    overall_exit_code,
    run_report,
)
from neuronc.profile import load_builds
from neuronc.resources import default_jobs

__all__ = [
    "BuildReport",
    "BuildStatus",
    "StageReport",
    "build_one",
    "check_backends",
    "compile_profiles",
    "copy_bundle",
    "default_jobs",
    "load_builds",
    "overall_exit_code",
    "run_report",
]
