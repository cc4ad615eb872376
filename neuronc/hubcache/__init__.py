"""The Hugging Face Neuron cache (optimum-neuron's compile cache on the Hub): read its registry.

Python API (what ``neuronc cache-lookup`` and ``neuronc plan`` use)::

    from neuronc.hubcache import HubSource, SnapshotSource, Filters, lookup_model, lookup_builds

    source = SnapshotSource("mirror/")                 # or HubSource.from_environment()
    result = lookup_model("meta-llama/Llama-3.1-8B", source, Filters(tp_degree=8))
    builds, _ = lookup_builds(load_profile("p.yaml").builds, source)

Importing this package imports neither huggingface_hub nor transformers; a ``HubSource`` imports
huggingface_hub when it first talks to the Hub. See docs/cache-lookup.md.
"""

from __future__ import annotations

from neuronc.hubcache.configs import CACHE_WHITE_LIST, ModelArch, arch_digest, normalize_config
from neuronc.hubcache.lookup import (
    ArchCheck,
    BuildLookup,
    FieldDiff,
    Filters,
    LookupResult,
    Match,
    ModelContext,
    Nearest,
    compare_arch,
    lookup_build,
    lookup_builds,
    lookup_model,
    model_context,
    wanted_fields,
)
from neuronc.hubcache.registry import (
    CacheEntry,
    EntryProblem,
    Query,
    Registry,
    RegistryPath,
    entry_hash,
    parse_entry,
    parse_registry_path,
    serialize_entry,
)
from neuronc.hubcache.sources import HubSource, RegistrySource, SnapshotSource, resolve_cache_repo

__all__ = [
    "CACHE_WHITE_LIST",
    "ArchCheck",
    "BuildLookup",
    "CacheEntry",
    "EntryProblem",
    "FieldDiff",
    "Filters",
    "HubSource",
    "LookupResult",
    "Match",
    "ModelArch",
    "ModelContext",
    "Nearest",
    "Query",
    "Registry",
    "RegistryPath",
    "RegistrySource",
    "SnapshotSource",
    "arch_digest",
    "compare_arch",
    "entry_hash",
    "lookup_build",
    "lookup_builds",
    "lookup_model",
    "model_context",
    "normalize_config",
    "parse_entry",
    "parse_registry_path",
    "resolve_cache_repo",
    "serialize_entry",
    "wanted_fields",
]
