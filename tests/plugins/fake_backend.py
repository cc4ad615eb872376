"""A small backend registered like a third-party plugin, plus helpers that build real bundles with it.

Only the backend is a double: bundles go through the real BundleWriter, reader and LocalStore.
Register it with ``register()`` (``plugins.registry.register_backend``), exactly as an
installed package's ``neuronc.backends`` entry point would appear.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from neuronc.backends.base import BackendBase, CompiledGraph, CompileJob, CompileResult
from neuronc.build import Build
from neuronc.bundle import BuildRecord, BundleWriter, Graph, Shard, Stage, WeightsSource
from neuronc.keys import ConfigKey
from neuronc.pipeline.context import resolve_build
from neuronc.spec import BuildSpec, ModelSection, ResolvedSequence
from neuronc.store import LocalStore
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
    store: LocalStore | None = None,
    spec: BuildSpec | None = None,
    shard_bytes: int = 8192,
    artifact_bytes: int = 4096,
    extra_files: dict[str, bytes] | None = None,
    pause: float = 0.0,
) -> Path:
    """Build a real bundle with the fake backend: profile, model files, shards, artifacts, logs."""
    from neuronc.backends.base import CompileJob

    register()
    spec = spec or make_spec(options={"artifact_bytes": artifact_bytes})
    ctx = resolve_build(Build.received(spec), strict=False)
    backend = ctx.backend
    key: ConfigKey = ctx.config
    versions = ctx.versions
    if store is not None:
        writer = store.writer(key.hash, ctx.toolchain_key)
    else:
        assert destination is not None
        writer = BundleWriter(destination)
    stages: list[Stage] = []
    with writer:
        with _stage(stages, "load"):
            writer.write_text("profile.yaml", f"model: {{id: {spec.model.id}}}\nbackend: {spec.backend}\n")
            writer.write_text("model/config.json", '{"model_type": "llama", "num_attention_heads": 4}\n')
        shards = []
        with _stage(stages, "split"):
            for rank in range(spec.tp_degree):
                rel = f"weights/rank{rank}.safetensors"
                with writer.open(rel, "weights") as f:
                    block = bytes([(rank * 31 + i) % 251 for i in range(1024)])
                    for _ in range(shard_bytes // 1024):
                        f.write(block)
                        if pause:
                            time.sleep(pause)
                entry = writer.files[rel]
                shards.append(Shard(rank=rank, file=rel, bytes=entry.size, sha256=entry.sha256))
        with _stage(stages, "compile"):
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
        graphs = [
            Graph(
                name=g.graph.name,
                role=g.graph.role,
                batch=g.graph.batch,
                bucket=g.graph.bucket,
                artifact=g.artifact,
                compile_seconds=g.compile_seconds,
                cache_hit=g.cache_hit,
            )
            for g in result.graphs
        ]
        weights = WeightsSource(id=spec.model.id, revision=spec.model.revision, mode=spec.weights, files=[])
        record = BuildRecord.for_build(
            spec,
            key,
            versions,
            toolchain_label=ctx.toolchain_label,
            graphs=graphs,
            shards=shards,
            weights=weights,
            stages=stages,
            extra=result.extra,
        )
        return writer.finish(record)


@contextlib.contextmanager
def _stage(stages: list[Stage], name: str) -> Iterator[None]:
    """Time a stage for the manifest's ``stages`` record."""
    start = time.perf_counter()
    try:
        yield
    finally:
        stages.append(Stage(name=name, wall_seconds=round(time.perf_counter() - start, 6)))


def spec_key(spec: BuildSpec, environ: dict[str, str] | None = None) -> ConfigKey:
    """The config key of ``spec`` as every command works it out (``neuronc.pipeline.resolve_build``)."""
    register()
    return resolve_build(Build.received(spec), strict=False, environ=environ).config
