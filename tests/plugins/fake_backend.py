"""A small backend registered like a third-party plugin, plus helpers that build real bundles with it.

Only the backend is a double: bundles go through the real BundleWriter, reader and Store.
Register it with ``register()`` (``plugins.registry.register_backend``), exactly as an
installed package's ``neuronc.backends`` entry point would appear.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, ClassVar

from neuronc.backends.base import BackendBase, CompiledGraph, CompileJob, CompileResult
from neuronc.bundle import BundleWriter
from neuronc.keys import ConfigKey, config_key, toolchain_key
from neuronc.spec import BuildSpec, ModelSection, ResolvedSequence
from neuronc.store import Store
from plugins.registry import register_backend

NAME = "fake"
ENTRY_POINT = "plugins.fake_backend:FakeBackend"
TESTS_DIR = str(Path(__file__).resolve().parent.parent)
# Installed versions are read from the environment so tests can simulate another host.
VERSION_ENV = "NEURONC_FAKE_CC_VERSION"


class FakeBackend(BackendBase):
    name: ClassVar[str] = NAME
    description: ClassVar[str] = "test double: writes deterministic fake artifacts"
    targets: ClassVar[frozenset[str]] = frozenset({"cpu", "inf2", "trn1", "trn2"})
    requires_tp_divides_heads: ClassVar[bool] = False

    def toolchain_versions(self) -> dict[str, str | None]:
        from neuronc import __version__

        return {"neuronc": __version__, "fake-cc": os.environ.get(VERSION_ENV, "1.2.3"), "fake-runtime": "0.9"}

    def compile(self, job: CompileJob) -> CompileResult:
        size = int(job.spec.options.get("artifact_bytes", 4096))
        graphs = []
        for graph in job.plan.graphs:
            start = time.perf_counter()
            path = job.artifacts_dir / f"{graph.name}.neff"
            seed = f"{graph.name}:{job.spec.model.id}".encode()
            path.write_bytes((seed * (size // len(seed) + 1))[:size])
            graphs.append(CompiledGraph(graph, f"artifacts/{path.name}", time.perf_counter() - start))
        return CompileResult(
            graphs, extra={"load_snippet": f"from fake import load\nmodel = load({{bundle}})  # {NAME}"}
        )

    def load_snippet(self, bundle_dir: str) -> str | None:
        return f"from fake import load\nmodel = load({bundle_dir!r})"


def register() -> None:
    register_backend(NAME, ENTRY_POINT)


def make_spec(**overrides: Any) -> BuildSpec:
    """A BuildSpec for the fake backend (registered here: keys ask the backend how it applies flags)."""
    register()
    data: dict[str, Any] = {
        "model": ModelSection(id="acme/tiny-llama", revision="0123456789abcdef0123456789abcdef01234567"),
        "backend": NAME,
        "target": "inf2",
        "tp_degree": 2,
        "batch_size": 1,
        "amp": "bf16",
        "sequence": ResolvedSequence(
            max_length=256, max_context_length=128, context_buckets=(64, 128), token_buckets=(128, 256)
        ),
        "weights": "presharded",
        "compiler_flags": ("-O1",),
        "options": {},
    }
    data.update(overrides)
    return BuildSpec(**data)


def build_bundle(
    destination: Path | None = None,
    *,
    store: Store | None = None,
    spec: BuildSpec | None = None,
    shard_bytes: int = 8192,
    artifact_bytes: int = 4096,
    extra_files: dict[str, bytes] | None = None,
    pause: float = 0.0,
) -> Path:
    """Build a real bundle with the fake backend: profile, model files, shards, artifacts, logs."""
    from neuronc.backends import get_backend
    from neuronc.backends.base import CompileJob

    register()
    spec = spec or make_spec(options={"artifact_bytes": artifact_bytes})
    backend = get_backend(spec.backend)
    key: ConfigKey = config_key(spec)
    versions = backend.toolchain_versions()
    if store is not None:
        writer = store.writer(config_hash=key.hash, toolchain=versions, backend=spec.backend, model_id=spec.model.id)
    else:
        assert destination is not None
        writer = BundleWriter(destination)
    with writer:
        with writer.stage("load"):
            writer.write_text("profile.yaml", f"model: {{id: {spec.model.id}}}\nbackend: {spec.backend}\n")
            writer.write_text("model/config.json", '{"model_type": "llama", "num_attention_heads": 4}\n')
        shards = []
        with writer.stage("split"):
            for rank in range(spec.tp_degree):
                rel = f"weights/rank{rank}.safetensors"
                with writer.open(rel, "weights") as f:
                    block = bytes([(rank * 31 + i) % 251 for i in range(1024)])
                    for _ in range(shard_bytes // 1024):
                        f.write(block)
                        if pause:
                            time.sleep(pause)
                shards.append({"rank": rank, "file": rel})
        with writer.stage("compile"):
            plan = backend.plan(spec)
            job = CompileJob(
                spec=spec,
                plan=plan,
                checkpoint_dir=writer.path,
                artifacts_dir=writer.artifacts_dir,
                logs_dir=writer.logs_dir,
                work_dir=writer.path,
            )
            result = backend.compile(job)
            for graph in result.graphs:
                writer.adopt(graph.artifact, "artifact")
            (writer.logs_dir / "compile.log").write_text("ok\n")  # left for finish() to adopt
        for rel, data in (extra_files or {}).items():
            writer.write_bytes(rel, data)
        return writer.finish(
            {
                "spec": spec,
                "config_key": key,
                "toolchain": versions,
                "toolchain_key": toolchain_key(versions),
                "graphs": result.graphs,
                "shards": shards,
                "weights": {"id": spec.model.id, "revision": spec.model.revision, "mode": spec.weights, "files": []},
                "extra": result.extra,
            }
        )
