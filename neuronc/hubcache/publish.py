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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronc.compile_cache import EntryState, classify
from neuronc.errors import InvalidInputError, RemoteStoreError, from_foreign, printable
from neuronc.hubcache import layout
from neuronc.hubcache.blobs import module_file

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
    """What a bundle publishes, or why not (``skipped``): read from its manifest and artifacts.

    The bundle is verified first (every file's SHA-256 against its manifest: an edited
    ``neuron_config.json`` is exit 4, never published under the id it now names); every value a
    path is made of is checked against optimum-neuron's layout (``hubcache.layout``) before
    anything is written or uploaded.
    """
    from neuronc.bundle import read_manifest, verify_bundle

    manifest = read_manifest(bundle_dir)
    pub = BundlePublication(str(bundle_dir))
    if manifest.backend != "optimum-neuron":
        pub.skipped.append(
            f"backend {printable(manifest.backend)}: only optimum-neuron bundles have optimum-neuron's cache "
            "layout (NxD Inference and vLLM keep their compiled graphs in their own artifacts)"
        )
        return pub
    verify_bundle(bundle_dir, manifest=manifest).raise_for_problems()
    optimum = manifest.extra.get("optimum_neuron")
    recorded = optimum.get("compile_cache") if isinstance(optimum, dict) else None
    model = manifest.profile.get("model")
    task = model.get("task", "text-generation") if isinstance(model, dict) else "text-generation"
    compiler = manifest.toolchain.get("neuronx-cc")
    return publication(
        pub, bundle_dir / "artifacts", recorded if isinstance(recorded, dict) else {}, task=task,
        cache_dir=cache_dir, model_id=model_id, compiler=compiler if isinstance(compiler, str) else None,
    )  # fmt: skip


def publication(
    pub: BundlePublication,
    artifacts: Path,
    recorded: dict[str, Any],
    *,
    task: object,
    cache_dir: Path | None = None,
    model_id: str | None = None,
    compiler: str | None = None,
) -> BundlePublication:
    """Fill ``pub`` from an export's directory and the compile-cache entries it recorded.

    ``recorded`` is ``extra.optimum_neuron.compile_cache`` of the manifest (``cache_dir``, ``modules``).
    Nothing is filled unless every path part is valid: each problem is one ``skipped`` line naming
    the field it came from.
    """
    from neuronc.hubcache.configs import ConfigError, normalize_config
    from neuronc.hubcache.entries import entry_hash, serialize_entry
    from neuronc.jsonfile import read_json

    modules = recorded.get("modules")
    modules = modules if isinstance(modules, list) else []
    recorded_dir = recorded.get("cache_dir")
    where = cache_dir or (Path(recorded_dir) if isinstance(recorded_dir, str) and recorded_dir else None)
    if not modules:
        pub.skipped.append("the manifest names no compiled graph (built before neuronc recorded them, or all cached)")
    try:
        config = read_json(artifacts / "config.json", max_bytes=4 * 1024 * 1024, what="config.json")
        neuron = read_json(artifacts / "neuron_config.json", max_bytes=4 * 1024 * 1024, what="neuron_config.json")
    except OSError as exc:
        pub.skipped.append(f"artifacts: cannot read the exported configs: {exc.strerror or exc}")
        return pub
    except InvalidInputError as exc:
        pub.skipped.append(f"artifacts: {exc.message}")
        return pub
    if not isinstance(config, dict) or not isinstance(neuron, dict):
        pub.skipped.append("artifacts: config.json and neuron_config.json must be JSON objects")
        return pub
    chosen = model_id if model_id is not None else neuron.get("checkpoint_id")
    field = "--model-id" if model_id is not None else "neuron_config.json: checkpoint_id"
    version = neuron.get("neuronxcc_version") or compiler
    problems = [
        layout.task_problem(task, "profile: model.task"),
        layout.compiler_problem(version, "neuron_config.json: neuronxcc_version"),
        layout.optimum_problem(neuron.get("optimum_neuron_version"), "neuron_config.json: optimum_neuron_version"),
        layout.model_type_problem(config.get("model_type"), "config.json: model_type"),
        None if chosen is None else layout.hub_id_problem(chosen, field),
    ]
    pub.skipped.extend(p for p in problems if p is not None)
    if chosen is None:
        pub.skipped.append(
            "a local model has no Hub id for the registry (optimum-neuron writes no entry for one): "
            "pass --model-id ORG/NAME"
        )
    if pub.skipped:
        return pub
    assert isinstance(chosen, str) and isinstance(task, str)
    folder = f"neuronxcc-{version}"
    for module in modules:
        pub.files.update(_module_files(pub, module, folder, where))
    if pub.skipped:
        pub.files.clear()
        return pub
    try:
        arch = normalize_config(config, task)
    except ConfigError as exc:
        pub.skipped.append(f"config.json: {printable(str(exc))}")
        return pub
    if arch is None:
        pub.skipped.append(
            f"config.json: model type {printable(str(config.get('model_type')))!r} cannot be digested without "
            "transformers 4.57"
        )
        return pub
    dtype = neuron.get("torch_dtype") if isinstance(neuron.get("torch_dtype"), str) else None
    text = serialize_entry(arch.export_config(dtype), neuron, model_id=chosen, task=task)
    registry = f"{folder}/{REGISTRY_DIR}/{neuron['optimum_neuron_version']}"
    stem = entry_hash(text)
    pub.model_id = chosen
    pub.entry_text = text
    pub.registry_path = f"{registry}/{arch.export_digest(dtype)}/{stem}.json"
    pub.alias_path = f"{registry}/{arch.model_type}/{chosen}/{stem}.json"
    return pub


def _module_files(pub: BundlePublication, module: object, folder: str, where: Path | None) -> dict[str, Path]:
    """The files of one complete ``MODULE_*`` folder to publish; none (and a ``skipped`` line) when it cannot be."""
    problem = layout.module_problem(module, folder)
    if problem is not None:
        pub.skipped.append(problem)
        return {}
    assert isinstance(module, str)
    source = where / module if where is not None else None
    if source is None or not source.is_dir() or source.is_symlink():
        pub.skipped.append(f"{module}: not in the local compile cache {printable(str(where))}")
        return {}
    state, _, _ = classify(source)
    if state != EntryState.COMPLETE:
        pub.skipped.append(f"{module}: {state} in {printable(str(where))} (only complete entries are published)")
        return {}
    files: dict[str, Path] = {}
    for name in MODULE_FILES:
        content, why = module_file(source / name)
        if why is not None:
            pub.skipped.append(f"{module}/{name}: {why}")
            return {}
        if content is not None:
            files[f"{module}/{name}"] = content
    return files


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
        try:
            head = api.repo_info(repo_id).sha
            info = api.create_commit(repo_id, operations, commit_message=message, parent_commit=head)
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (409, 412) and attempt < retries:
                sleep(min(30.0, 2.0**attempt))
                continue
            raise _hub_error(exc, repo_id) from None
        except Exception as exc:  # the Hub unreachable, offline mode, a bad id: the table says which
            raise _hub_error(exc, repo_id) from None
        return {"repo": repo_id, "commit": info.oid, "files": len(operations), "tries": attempt}
    raise RemoteStoreError(f"{repo_id}: the branch kept moving; gave up after {retries} tries")


def _hub_error(exc: Exception, repo_id: str) -> Exception:
    """``exc`` as the error table maps it (exit 2 for a missing repository or refused token, 5 for the
    network and everything else the Hub answers); an exception the table does not know is returned
    as it is (a bug: it propagates)."""
    error = from_foreign(
        exc,
        f"{printable(repo_id)}: cannot upload to the Hub",
        error=RemoteStoreError,
        hint="check the network and the token's write access (HF_TOKEN, `hf auth login`); "
        "--to DIR writes the same tree into a directory",
    )
    return exc if error is None else error


def registry_paths(publications: Sequence[BundlePublication]) -> list[str]:
    return sorted(p.registry_path for p in publications if p.publishable and p.registry_path)


def to_json(publications: Sequence[BundlePublication]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(p.to_json())) for p in publications]
