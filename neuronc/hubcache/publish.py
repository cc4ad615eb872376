"""`neuronc cache synchronize`: bundles' compiled graphs into a Hugging Face Neuron cache repository.

The layout is optimum-neuron 0.4.5's (shared/reference/hf-neuron-cache.md §2; huggingface/optimum-neuron
v0.4.5 ``optimum/neuron/cache/hub_cache.py``):

- ``neuronxcc-<compiler>/MODULE_<graph>+<flags>/`` — each graph the bundle's export compiled, as
  libneuronxla left it in the local compile cache (``model.neff`` + ``model.done``, the HLO and the
  flags); the bundle's manifest names them (``extra.optimum_neuron.compile_cache.modules``);
- ``neuronxcc-<compiler>/0_REGISTRY/<optimum-neuron version>/<arch digest>/<hash>.json`` — the registry
  entry ``SingleModelCacheEntry.serialize()`` writes after an export (the exported config.json,
  normalised as 0.4.5 does, plus the exported neuron_config.json); its alias
  ``<model_type>/<org>/<name>/<hash>.json`` beside it, as a second copy (the Hub has no links).

The digest and the entry text come from ``neuronc.hubcache`` (what ``cache-lookup`` computes), so
what is published here is what ``cache-lookup`` and optimum-neuron find. A module folder that is not
complete (failed, locked, missing) is never published; its bundle's entry is then left out too,
since an entry whose graphs are missing would make optimum-neuron compile after all.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.compile_cache import EntryState, classify
from neuronc.errors import InvalidInputError, RemoteStoreError, from_foreign

REGISTRY_DIR = "0_REGISTRY"
# The files of a MODULE_* folder that are published: the result and what it was compiled from (never
# a lock, a log or scratch).
MODULE_FILES = ("model.neff", "model.done", "model.hlo_module.pb", "model.hlo.pb", "compile_flags.json")
CONFLICT_RETRIES = 5


@dataclass
class BundlePublication:
    """What one bundle contributes: repository paths and the local file (or text) behind each."""

    bundle: str
    model_id: str | None = None
    registry_path: str | None = None
    alias_path: str | None = None
    entry_text: str | None = None
    files: dict[str, Path] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def publishable(self) -> bool:
        return self.entry_text is not None and not self.skipped

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "model_id": self.model_id,
            "published": self.publishable,
            "registry_path": self.registry_path,
            "alias_path": self.alias_path,
            "modules": sorted({p.rsplit("/", 1)[0] for p in self.files}),
            "skipped": self.skipped,
        }

    def contents(self) -> dict[str, bytes | Path]:
        """Repository path -> bytes (registry files) or a local file (module files)."""
        result: dict[str, bytes | Path] = dict(self.files)
        if self.entry_text is not None and self.registry_path is not None:
            data = self.entry_text.encode("utf-8")
            result[self.registry_path] = data
            if self.alias_path is not None:
                result[self.alias_path] = data
        return result


def collect(bundle_dir: Path, *, cache_dir: Path | None = None, model_id: str | None = None) -> BundlePublication:
    """What a bundle publishes, or why not (``skipped``): read from its manifest and artifacts."""
    from neuronc.bundle import read_manifest

    manifest = read_manifest(bundle_dir)
    pub = BundlePublication(str(bundle_dir))
    if manifest.backend != "optimum-neuron":
        pub.skipped.append(
            f"backend {manifest.backend}: only optimum-neuron bundles have optimum-neuron's cache layout "
            "(NxD Inference and vLLM keep their compiled graphs in their own artifacts)"
        )
        return pub
    recorded = (manifest.extra.get("optimum_neuron") or {}).get("compile_cache") or {}
    task = manifest.profile.get("model", {}).get("task", "text-generation")
    return publication(
        pub, bundle_dir / "artifacts", recorded, task=task, cache_dir=cache_dir, model_id=model_id,
        compiler=manifest.toolchain.get("neuronx-cc"),
    )  # fmt: skip


def publication(
    pub: BundlePublication,
    artifacts: Path,
    recorded: dict[str, Any],
    *,
    task: str,
    cache_dir: Path | None = None,
    model_id: str | None = None,
    compiler: str | None = None,
) -> BundlePublication:
    """Fill ``pub`` from an export's directory and the compile-cache entries it recorded.

    ``recorded`` is ``extra.optimum_neuron.compile_cache`` of the manifest (``cache_dir``, ``modules``).
    """
    from neuronc.hubcache.configs import normalize_config
    from neuronc.hubcache.entries import entry_hash, serialize_entry
    from neuronc.jsonfile import read_json

    modules = [m for m in recorded.get("modules") or [] if isinstance(m, str)]
    where = cache_dir or (Path(recorded["cache_dir"]) if isinstance(recorded.get("cache_dir"), str) else None)
    if not modules:
        pub.skipped.append("the manifest names no compiled graph (built before neuronc recorded them, or all cached)")
    for module in modules:
        folder, _, name = module.partition("/")
        if not folder.startswith("neuronxcc-") or not name.startswith("MODULE_") or "/" in name or ".." in module:
            pub.skipped.append(f"{module}: not a neuronxcc-*/MODULE_* name")
            continue
        source = where / module if where is not None else None
        if source is None or not source.is_dir():
            pub.skipped.append(f"{module}: not in the local compile cache {where}")
            continue
        state, _, _ = classify(source)
        if state != EntryState.COMPLETE:
            pub.skipped.append(f"{module}: {state} in {where} (only complete entries are published)")
            continue
        for file in MODULE_FILES:
            if (source / file).is_file() and not (source / file).is_symlink():
                pub.files[f"{module}/{file}"] = source / file
    try:
        config = read_json(artifacts / "config.json", max_bytes=4 * 1024 * 1024, what="config.json")
        neuron = read_json(artifacts / "neuron_config.json", max_bytes=4 * 1024 * 1024, what="neuron_config.json")
    except OSError as exc:
        pub.skipped.append(f"artifacts: cannot read the exported configs: {exc.strerror or exc}")
        return pub
    if not isinstance(config, dict) or not isinstance(neuron, dict):
        pub.skipped.append("artifacts: config.json and neuron_config.json must be JSON objects")
        return pub
    pub.model_id = model_id or neuron.get("checkpoint_id") or None
    if pub.model_id is None or pub.model_id.count("/") != 1:
        pub.skipped.append(
            "a local model has no Hub id for the registry (optimum-neuron writes no entry for one): "
            "pass --model-id ORG/NAME"
        )
        return pub
    arch = normalize_config(config, task)
    if arch is None:
        pub.skipped.append(
            f"config.json: model type {config.get('model_type')!r} cannot be digested without transformers 4.57"
        )
        return pub
    dtype = neuron.get("torch_dtype") if isinstance(neuron.get("torch_dtype"), str) else None
    entry_config = arch.export_config(dtype)
    text = serialize_entry(entry_config, neuron, model_id=pub.model_id, task=task)
    folder = f"neuronxcc-{neuron.get('neuronxcc_version') or compiler}"
    registry = f"{folder}/{REGISTRY_DIR}/{neuron.get('optimum_neuron_version')}"
    stem = entry_hash(text)
    pub.entry_text = text
    pub.registry_path = f"{registry}/{arch.export_digest(dtype)}/{stem}.json"
    pub.alias_path = f"{registry}/{arch.model_type}/{pub.model_id}/{stem}.json"
    return pub


def write_tree(publications: Sequence[BundlePublication], directory: Path) -> list[str]:
    """Write the publishable bundles' files under ``directory`` (the repository's paths); the paths written."""
    written: list[str] = []
    root = directory.resolve()
    for pub in publications:
        if not pub.publishable:
            continue
        for path, content in pub.contents().items():
            target = (root / path).resolve()
            if not str(target).startswith(str(root) + os.sep):
                raise InvalidInputError(f"--to {directory}: {path} would be written outside it")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".neuronc-tmp")
            if isinstance(content, Path):
                shutil.copyfile(content, tmp)
            else:
                tmp.write_bytes(content)
            os.replace(tmp, target)
            written.append(path)
    return sorted(written)


def upload(
    publications: Sequence[BundlePublication],
    repo_id: str,
    *,
    api: Any = None,
    retries: int = CONFLICT_RETRIES,
    sleep: Any = time.sleep,
) -> dict[str, Any]:
    """Upload the publishable bundles' files in one commit, retried when the branch moved (409/412).

    Each try names the head it read as ``parent_commit``, as optimum-neuron's synchronize does after
    0.4.5 (huggingface/optimum-neuron main ``hub_cache.py``), so a concurrent writer makes the commit
    fail rather than be overwritten; the files are the same on every try.
    """
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = api or HfApi()
    contents: dict[str, bytes | Path] = {}
    for pub in publications:
        if pub.publishable:
            contents.update(pub.contents())
    if not contents:
        return {"repo": repo_id, "commit": None, "files": 0, "tries": 0}
    operations = [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(c) if isinstance(c, Path) else c)
        for path, c in sorted(contents.items())
    ]
    message = f"neuronc cache synchronize: {sum(p.publishable for p in publications)} bundle(s)"
    for attempt in range(1, retries + 1):
        head = api.repo_info(repo_id).sha
        try:
            info = api.create_commit(repo_id, operations, commit_message=message, parent_commit=head)
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (409, 412) and attempt < retries:
                sleep(min(30.0, 2.0**attempt))
                continue
            error = from_foreign(
                exc, f"{repo_id}: commit failed", error=RemoteStoreError, hint="check the token's write access"
            )
            if error is None:
                raise
            raise error from None
        return {"repo": repo_id, "commit": info.oid, "files": len(operations), "tries": attempt}
    raise RemoteStoreError(f"{repo_id}: the branch kept moving; gave up after {retries} tries")


def registry_paths(publications: Sequence[BundlePublication]) -> list[str]:
    return sorted(p.registry_path for p in publications if p.publishable and p.registry_path)


def to_json(publications: Sequence[BundlePublication]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(p.to_json())) for p in publications]
