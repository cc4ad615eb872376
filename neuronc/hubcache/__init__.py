"""The Hugging Face Neuron cache (optimum-neuron's compile cache on the Hub): read its registry.

Python API (what ``neuronc cache-lookup`` and ``neuronc plan`` use)::

    from neuronc.hubcache import HubSource, SnapshotSource, Filters, lookup_model, lookup_builds

    source = SnapshotSource("mirror/")                 # or HubSource.from_environment()
    result = lookup_model("meta-llama/Llama-3.1-8B", source, Filters(tp_degree=8))
    builds, _ = lookup_builds(load_profile("p.yaml").builds, source)

Modules, from the bottom up: ``paths`` (registry paths, versions), ``entries`` (one entry file,
parsed as hostile input), ``configs`` (optimum-neuron 0.4.5's config normalisation and digest),
``arch`` (architecture comparison and the index's fingerprint), ``table`` (parsed entries as
rows), ``registry`` (a loaded registry, query selection), ``index`` (the persistent index file),
``snapshot``/``hub``/``mirror``/``sources`` (where entries come from), ``lookup`` and ``builds``.

Importing this package imports nothing else; each name loads its module when first used, and
neither huggingface_hub nor transformers is imported until a ``HubSource`` first talks to the Hub.
See docs/cache-lookup.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronc._lazy import lazy_attributes

if TYPE_CHECKING:
    from neuronc.hubcache.arch import ArchCheck, arch_key, compare_arch
    from neuronc.hubcache.builds import (
        BuildLookup,
        FieldDiff,
        LookupStatus,
        Nearest,
        Wanted,
        lookup_build,
        lookup_builds,
    )
    from neuronc.hubcache.configs import CACHE_WHITE_LIST, ModelArch, arch_digest, normalize_config
    from neuronc.hubcache.entries import CacheEntry, EntryError, EntryProblem, entry_hash, parse_entry, serialize_entry
    from neuronc.hubcache.hub import HubSource
    from neuronc.hubcache.lookup import (
        Filters,
        Hidden,
        LookupResult,
        Match,
        ModelContext,
        Relation,
        lookup_model,
        model_context,
    )
    from neuronc.hubcache.mirror import MirrorResult, mirror
    from neuronc.hubcache.paths import Layout, RegistryPath, parse_registry_path
    from neuronc.hubcache.registry import IndexState, Query, Registry, SourceInfo
    from neuronc.hubcache.snapshot import SnapshotSource
    from neuronc.hubcache.sources import RegistrySource, resolve_cache_repo

# Names are imported from their module on first use (PEP 562): a snapshot lookup then never loads
# the Hub client, the mirror writer or the profile lookups.
_WHERE = {
    "ArchCheck": "arch",
    "arch_key": "arch",
    "compare_arch": "arch",
    "BuildLookup": "builds",
    "LookupStatus": "builds",
    "FieldDiff": "builds",
    "Nearest": "builds",
    "Wanted": "builds",
    "lookup_build": "builds",
    "lookup_builds": "builds",
    "CACHE_WHITE_LIST": "configs",
    "ModelArch": "configs",
    "arch_digest": "configs",
    "normalize_config": "configs",
    "CacheEntry": "entries",
    "EntryError": "entries",
    "EntryProblem": "entries",
    "entry_hash": "entries",
    "parse_entry": "entries",
    "serialize_entry": "entries",
    "HubSource": "hub",
    "Filters": "lookup",
    "Hidden": "lookup",
    "LookupResult": "lookup",
    "Match": "lookup",
    "ModelContext": "lookup",
    "Relation": "lookup",
    "lookup_model": "lookup",
    "model_context": "lookup",
    "MirrorResult": "mirror",
    "mirror": "mirror",
    "Layout": "paths",
    "RegistryPath": "paths",
    "parse_registry_path": "paths",
    "IndexState": "registry",
    "Query": "registry",
    "Registry": "registry",
    "SourceInfo": "registry",
    "SnapshotSource": "snapshot",
    "RegistrySource": "sources",
    "resolve_cache_repo": "sources",
}


__getattr__ = lazy_attributes(__name__, {name: f"neuronc.hubcache.{module}" for name, module in _WHERE.items()})


__all__ = [
    "CACHE_WHITE_LIST",
    "ArchCheck",
    "BuildLookup",
    "CacheEntry",
    "EntryError",
    "EntryProblem",
    "FieldDiff",
    "Filters",
    "Hidden",
    "HubSource",
    "IndexState",
    "Layout",
    "LookupResult",
    "LookupStatus",
    "Match",
    "MirrorResult",
    "ModelArch",
    "ModelContext",
    "Nearest",
    "Query",
    "Registry",
    "RegistryPath",
    "RegistrySource",
    "Relation",
    "SnapshotSource",
    "SourceInfo",
    "Wanted",
    "arch_digest",
    "arch_key",
    "compare_arch",
    "entry_hash",
    "lookup_build",
    "lookup_builds",
    "lookup_model",
    "mirror",
    "model_context",
    "normalize_config",
    "parse_entry",
    "parse_registry_path",
    "resolve_cache_repo",
    "serialize_entry",
]
