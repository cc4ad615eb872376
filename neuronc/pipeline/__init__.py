"""The compile pipeline: profiles → Builds → resolved builds → lookup, pre-flight, split, compile, publish, sign.

``compile_profiles`` runs every build of every profile given and returns one ``BuildReport`` per
build; ``build_one`` runs a single ``Build`` (``neuronc.build``: a spec and its backend). Library
code here returns or raises: progress goes to the ``ProgressSink`` passed in, and a build's failure
is recorded in its report (with the exit code the CLI will return and the exception itself) rather
than stopping the other builds — except an environment error, which would fail every remaining
build the same way. With a signer, the signing stage (``sign``) signs what the run built.

A store hit is the fast path: resolving a build, its keys and the lookup import neither torch nor
transformers, so ``neuronc compile`` on a built profile returns in a fraction of a second.

Modules: ``context`` (``ResolvedBuild``: a build resolved once), ``identity`` (a resolved build as
it travels to another process: a Ray task builds it at the driver's commit and checks its key),
``moved`` (which ref moved when a ``--only`` key matches no build), ``stages`` (what happens on a
miss), ``run`` (the loop over builds), ``report`` (typed results and the JSON report), ``sign``
(signing what a run built), ``timing`` (stage clock), ``nearest`` (the nearest bundle on a miss),
``out`` (``--out`` copies), ``messages`` (the run's context-scoped sink for messages to people),
``plan`` (`neuronc plan` and `neuronc matrix`).
"""

from typing import TYPE_CHECKING

from neuronc._lazy import lazy_attributes
from neuronc.pipeline.compile import compile_profiles
from neuronc.pipeline.context import UNRESOLVED, ResolvedBuild, resolve_build
from neuronc.pipeline.report import (
    BuildReport,
    BuildStatus,
    NearestBundle,
    StageReport,
    overall_exit_code,
    run_report,
)
from neuronc.pipeline.run import BuildOptions, build_one, check_backends, open_store, select_builds

if TYPE_CHECKING:
    from neuronc.pipeline.nearest import nearest_bundle, nearest_lines
    from neuronc.pipeline.out import bundle_dirname, place_bundle
    from neuronc.pipeline.stages import failed_logs_root

# What only a miss or --out needs is imported when first asked for: a store hit never loads it.
_LAZY = {
    "nearest_bundle": "neuronc.pipeline.nearest",
    "nearest_lines": "neuronc.pipeline.nearest",
    "bundle_dirname": "neuronc.pipeline.out",
    "place_bundle": "neuronc.pipeline.out",
    "failed_logs_root": "neuronc.pipeline.stages",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "UNRESOLVED",
    "BuildOptions",
    "BuildReport",
    "BuildStatus",
    "NearestBundle",
    "ResolvedBuild",
    "StageReport",
    "build_one",
    "bundle_dirname",
    "check_backends",
    "compile_profiles",
    "failed_logs_root",
    "nearest_bundle",
    "nearest_lines",
    "open_store",
    "overall_exit_code",
    "place_bundle",
    "resolve_build",
    "run_report",
    "select_builds",
]
