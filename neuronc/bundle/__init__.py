"""Bundles: the manifest schema, the staging writer, the reader, verify and toolchain checks.

A bundle is a directory a user can copy to a Neuron host and trust::

    <bundle>/
      manifest.json   written last: the bundle exists only once it is complete
      profile.yaml    model/  weights/  artifacts/  deploy/  logs/

Writing::

    with BundleWriter(out_dir) as writer:            # or store.writer(...)
        with writer.open("artifacts/model.pt", "artifact") as f:
            f.write(data)                            # hashed while written
        writer.adopt("weights/rank0.safetensors", "weights", sha256=digest, size=n)
        path = writer.finish(BuildRecord.for_build(spec, key, versions, graphs=[...], ...))

Reading: ``read_manifest(path)``, ``verify_bundle(path)``, ``compare_toolchain(manifest, versions)``.
Nothing here imports torch or transformers.
"""

from __future__ import annotations

from neuronc.bundle._manifest import (
    BUNDLE_DIRS,
    BUNDLE_PLACEHOLDER,
    MANIFEST_NAME,
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    ROLES,
    SCHEMA_MAJOR,
    SCHEMA_VERSION,
    FileEntry,
    Graph,
    HostInfo,
    Manifest,
    NewerSchemaError,
    Shard,
    Stage,
    WeightFile,
    WeightsSource,
    manifest_json_schema,
    manifest_seal_problem,
    parse_manifest,
    path_problem,
    role_for,
    safe_text,
)
from neuronc.bundle._reader import (
    COMPATIBLE,
    IDENTICAL,
    INCOMPATIBLE,
    FileProblem,
    PackageDifference,
    PackageDifferenceJSON,
    ToolchainComparison,
    ToolchainJSON,
    VerifyJSON,
    VerifyReport,
    compare_toolchain,
    read_manifest,
    read_manifest_bytes,
    verify_bundle,
)
from neuronc.bundle._writer import BundleExistsError, BundleWriter, HashingFile, copy_bundle, peak_rss_bytes
from neuronc.bundle.record import BuildRecord, record_manifest

__all__ = [
    "BUNDLE_DIRS",
    "BUNDLE_PLACEHOLDER",
    "COMPATIBLE",
    "IDENTICAL",
    "INCOMPATIBLE",
    "MANIFEST_NAME",
    "MAX_FILES",
    "MAX_MANIFEST_BYTES",
    "ROLES",
    "SCHEMA_MAJOR",
    "SCHEMA_VERSION",
    "BuildRecord",
    "BundleExistsError",
    "BundleWriter",
    "FileEntry",
    "FileProblem",
    "Graph",
    "HashingFile",
    "HostInfo",
    "Manifest",
    "NewerSchemaError",
    "PackageDifference",
    "PackageDifferenceJSON",
    "Shard",
    "Stage",
    "ToolchainComparison",
    "ToolchainJSON",
    "VerifyJSON",
    "VerifyReport",
    "WeightFile",
    "WeightsSource",
    "compare_toolchain",
    "copy_bundle",
    "manifest_json_schema",
    "manifest_seal_problem",
    "parse_manifest",
    "path_problem",
    "peak_rss_bytes",
    "read_manifest",
    "read_manifest_bytes",
    "record_manifest",
    "role_for",
    "safe_text",
    "verify_bundle",
]
