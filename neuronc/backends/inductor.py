"""The embedded default backend: torch.export + AOTInductor on CPU.

Graphs (see docs/inductor.md): one context-encoding graph per (batch, context bucket) and one
token-generation graph per (batch, token bucket), where a token bucket is a KV-length window of a
static cache allocated at ``max_length``; the profile's default token buckets are ``[max_length]``,
so by default there is exactly one token-generation graph. Each graph is exported and compiled by
AOTInductor in its own process, into a weightless ``.pt2`` (``package_constants_in_so=False``); the
runtime binds one shared copy of the bundle's weights to every graph.

Every graph has a cache key (graph shape, model config, dtype, toolchain, Inductor options), and
compiled graphs are kept in a graph cache (``$NEURONC_GRAPH_CACHE``, default
``$XDG_CACHE_HOME/neuronc/graphs``): a build reuses every graph whose key it has seen, so changing
one bucket recompiles one graph.

Importing this module is cheap: torch and transformers are imported by the worker process
(``neuronc.backends._inductor_worker``) and by the runtime, never here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, ValidationError

from neuronc.backends.base import (
    GIB,
    ROLE_CONTEXT,
    ROLE_TOKEN,
    BackendBase,
    CompiledGraph,
    CompileJob,
    CompilePlan,
    CompileResult,
    CompilerFlagsMode,
    GraphSpec,
    HostRamModel,
)
from neuronc.errors import CompileError, InvalidInputError, log_tail
from neuronc.spec import StrictModel

if TYPE_CHECKING:
    from neuronc.backends._inductor_runtime import InductorRunner
    from neuronc.spec import BuildSpec

# Bump when the wrappers, the graph calling convention or the artifact layout change: it is part of
# every graph cache key and of artifacts/inductor.json.
GRAPH_FORMAT = 2
INDEX_NAME = "inductor.json"
GRAPH_CACHE_ENV = "NEURONC_GRAPH_CACHE"
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
# config.json fields that do not change a compiled graph.
_CONFIG_IGNORED = frozenset({"_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures"})
_LOG_TAIL_LINES = 40
_ISA_ORDER = ("default", "avx2", "avx512", "avx512_vnni")


def cpu_isa() -> str:
    """The vector ISA AOTInductor will target, read from /proc/cpuinfo (no torch import).

    Mirrors torch's CPU capability choice: avx512 needs avx512f/bw/vl/dq, avx2 needs avx2+fma.
    """
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx512_vnni" if "avx512_vnni" in flags else "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "default"


def isa_runs_here(compiled_isa: str, here: str | None = None) -> bool:
    """Whether code compiled for ``compiled_isa`` can run on this CPU (x86 ISAs are ordered)."""
    here = cpu_isa() if here is None else here
    if compiled_isa == here:
        return True
    if compiled_isa in _ISA_ORDER and here in _ISA_ORDER:
        return _ISA_ORDER.index(compiled_isa) <= _ISA_ORDER.index(here)
    return False


# ------------------------------------------------------------------------------------------------
# Graph cache
# ------------------------------------------------------------------------------------------------


def graph_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """Where compiled graphs are cached: $NEURONC_GRAPH_CACHE (``off`` disables), else the user cache."""
    sources = [env or {}, os.environ]
    for source in sources:
        value = source.get(GRAPH_CACHE_ENV)
        if value:
            return None if value.lower() in {"off", "0", "false", "none"} else Path(value).expanduser()
    from neuronc.locations import user_cache_dir

    return user_cache_dir() / "graphs"


def normalized_model_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """config.json without the fields that cannot change a compiled graph."""
    return {k: v for k, v in config.items() if k not in _CONFIG_IGNORED}


def graph_cache_key(
    graph: GraphSpec,
    *,
    max_length: int,
    dtype: str,
    model_config: Mapping[str, Any],
    toolchain: Mapping[str, str | None],
    inductor_config: Mapping[str, Any] | None = None,
) -> str:
    """SHA-256 of everything one compiled graph depends on; other buckets are not part of it."""
    from neuronc.keys import canonical_json, sha256_text

    data = {
        "format": GRAPH_FORMAT,
        "graph": {"role": graph.role, "batch": graph.batch, "bucket": graph.bucket},
        "max_length": max_length,
        "dtype": dtype,
        "model_config": normalized_model_config(model_config),
        "toolchain": dict(toolchain),
        "inductor_config": dict(inductor_config or {}),
    }
    return sha256_text(canonical_json(data))


def _graph_files(name: str) -> tuple[str, str, str]:
    """The files of one compiled graph: package, metadata, graph-owned constants."""
    return f"{name}.pt2", f"{name}.json", f"{name}.constants.safetensors"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached_entry(entry: Path, name: str, key: str) -> dict[str, Any] | None:
    """The metadata of a complete, intact cache entry, or None (missing, partial, corrupted)."""
    package, meta_name, constants = _graph_files(name)
    try:
        meta = json.loads((entry / meta_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("cache_key") != key or not (entry / constants).is_file():
        return None
    try:
        if _sha256_file(entry / package) != meta.get("package_sha256"):
            return None
    except OSError:
        return None
    return meta


# ------------------------------------------------------------------------------------------------
# Safetensors headers (no torch): what the bundle's weights can bind
# ------------------------------------------------------------------------------------------------


def safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            msg = f"{path}: not a safetensors file (too short)"
            raise ValueError(msg)
        (length,) = struct.unpack("<Q", prefix)
        if length > 100 * 1024 * 1024:
            msg = f"{path}: safetensors header of {length} bytes is implausible"
            raise ValueError(msg)
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        msg = f"{path}: safetensors header is not an object"
        raise ValueError(msg)
    header.pop("__metadata__", None)
    return header


_ST_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64", "I64": "int64", "I32": "int32"}


def weight_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.safetensors") if p.is_file())


def missing_constants(graph_meta: Mapping[str, Any], headers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Constants of a graph that no weight can supply (by key and shape); graph-owned ones excluded."""
    problems = []
    for fqn, info in sorted(graph_meta.get("constants", {}).items()):
        if info.get("graph_owned"):
            continue
        found = [headers[k] for k in info.get("keys", []) if k in headers]
        if not found:
            problems.append(f"{fqn}: no weight named {' or '.join(info.get('keys', []))}")
        elif list(found[0].get("shape", [])) != list(info.get("shape", [])):
            problems.append(f"{fqn}: weight has shape {found[0].get('shape')}, the graph expects {info.get('shape')}")
    return problems


# ------------------------------------------------------------------------------------------------
# The backend
# ------------------------------------------------------------------------------------------------


@dataclass
class _Pending:
    graph: GraphSpec
    key: str
    out_dir: Path
    log_path: Path


class InductorOptions(StrictModel):
    """``options:`` of the inductor backend."""

    inductor_config: dict[str, Any] = Field(
        default_factory=dict, description="torch._inductor.config names and values for AOTInductor"
    )


class InductorBackend(BackendBase):
    name: ClassVar[str] = "inductor"
    # Inductor takes no compiler flags (its knobs are options.inductor_config).
    compiler_flags_mode: ClassVar[CompilerFlagsMode] = CompilerFlagsMode.NONE
    # reference/cpu-aot-inductor.md: a 254M-parameter fp32 model (1.0 GB) peaked at 3.5 GB per graph process.
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(
        int(0.5 * GIB), 0.0, int(1.5 * GIB), True, "each graph process loads the model and binds 2× its weights"
    )
    toolchain_package: ClassVar[str | None] = "torch"
    can_run: ClassVar[bool] = True
    options_model: ClassVar[type[BaseModel] | None] = InductorOptions
    description: ClassVar[str] = "embedded CPU backend: torch.export + AOTInductor, one graph per bucket"
    targets: ClassVar[frozenset[str]] = frozenset({"cpu"})
    amp: ClassVar[frozenset[str]] = frozenset({"fp32", "bf16"})
    weights_modes: ClassVar[frozenset[str]] = frozenset({"presharded"})
    packages: ClassVar[tuple[str, ...]] = ("torch", "transformers", "safetensors")
    required: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    install_hint: ClassVar[str | None] = "pip install torch==2.13.0 && pip install 'neuronc[cpu]'"

    def supported_tp_degrees(self, target: str, options: Mapping[str, Any]) -> Collection[int] | None:
        return frozenset({1})

    def tp_degree_problem(self, tp: int, target: str, degrees: Collection[int]) -> str:
        from neuronc.backends import backend_names

        others = [n for n in backend_names() if n != self.name]
        return f"the inductor backend runs tp_degree 1 only; use one of {', '.join(others)} for tensor parallelism"

    def toolchain_versions(self) -> dict[str, str | None]:
        versions = super().toolchain_versions()
        versions["cpu_isa"] = cpu_isa()
        # The calling convention of the compiled graphs: a bundle of another format cannot run here.
        versions["inductor_graph_format"] = str(GRAPH_FORMAT)
        return versions

    # -- plan ------------------------------------------------------------------------------------
    def plan(self, spec: BuildSpec) -> CompilePlan:
        """One CTE per context bucket, one TKG per token bucket (the largest always ``max_length``)."""
        _check_options(spec)
        seq = spec.sequence
        notes = [
            "token buckets are KV-length windows of one static cache of max_length positions; "
            "graphs share the cache and one copy of the weights",
        ]
        token_buckets = sorted(set(seq.token_buckets))
        if token_buckets[-1] < seq.max_length:
            token_buckets.append(seq.max_length)
            notes.append(f"added token bucket {seq.max_length} (max_length) so every position can be generated")
        graphs = [GraphSpec(ROLE_CONTEXT, spec.batch_size, b) for b in seq.context_buckets]
        graphs += [GraphSpec(ROLE_TOKEN, spec.batch_size, b) for b in token_buckets]
        return CompilePlan(
            graphs=tuple(graphs),
            weights_layout="1 rank shard in weights/ (the full state dict), bound to every graph when loaded",
            notes=tuple(notes),
        )

    # -- compile ---------------------------------------------------------------------------------
    def compile(self, job: CompileJob) -> CompileResult:
        """Compile every graph of ``job.plan`` (cache hits copied, misses built in parallel processes)."""
        spec = job.spec
        _check_options(spec)
        if spec.tp_degree != 1:
            msg = f"the inductor backend runs tp_degree 1 only, got {spec.tp_degree}"
            raise InvalidInputError(msg)
        model_config = _read_model_config(job.checkpoint_dir)
        inductor_config = dict(spec.options.get("inductor_config") or {})
        toolchain = self.toolchain_versions()
        cache_root = graph_cache_dir(job.env)
        max_length = spec.sequence.max_length
        job.artifacts_dir.mkdir(parents=True, exist_ok=True)
        job.logs_dir.mkdir(parents=True, exist_ok=True)

        keys = {
            g: graph_cache_key(
                g,
                max_length=max_length,
                dtype=spec.dtype,
                model_config=model_config,
                toolchain=toolchain,
                inductor_config=inductor_config,
            )
            for g in job.plan.graphs
        }
        results: dict[GraphSpec, CompiledGraph] = {}
        metas: dict[GraphSpec, dict[str, Any]] = {}
        pending: list[_Pending] = []
        for graph in job.plan.graphs:
            key = keys[graph]
            started = time.perf_counter()
            entry = cache_root / key[:2] / key if cache_root is not None else None
            meta = _cached_entry(entry, graph.name, key) if entry is not None else None
            if entry is not None and meta is not None:
                _install(entry, graph.name, job, cache_hit=True, key=key)
                seconds = time.perf_counter() - started
                results[graph] = CompiledGraph(graph, f"artifacts/{graph.name}.pt2", seconds, cache_hit=True)
                metas[graph] = meta
                job.progress.task(f"graph {graph.name}").done("cached")
                continue
            if cache_root is not None:
                out_dir = cache_root / "tmp" / f"{key[:16]}-{os.getpid()}-{secrets.token_hex(4)}"
            else:
                out_dir = job.work_dir / "graphs" / graph.name
            pending.append(_Pending(graph, key, out_dir, out_dir / f"{graph.name}.log"))

        if pending:
            if cache_root is not None:
                _sweep_tmp(cache_root / "tmp")
            built = self._build_all(job, pending, model_config, inductor_config, max_length, cache_root)
            for item in pending:
                meta, seconds, entry = built[item.graph]
                _install(entry, item.graph.name, job, cache_hit=False, key=item.key)
                results[item.graph] = CompiledGraph(item.graph, f"artifacts/{item.graph.name}.pt2", seconds)
                metas[item.graph] = meta

        ordered = [results[g] for g in job.plan.graphs]
        _check_weights(job, [metas[g] for g in job.plan.graphs])
        index = _write_index(job, ordered, metas, keys, toolchain, model_config)
        return CompileResult(
            graphs=ordered,
            extra={
                "inductor": {
                    "index": f"artifacts/{INDEX_NAME}",
                    "graph_cache": str(cache_root) if cache_root is not None else None,
                    "cpu_isa": toolchain.get("cpu_isa"),
                    "graphs": {
                        g["name"]: {k: g[k] for k in ("cache_key", "export_seconds", "aoti_seconds", "built_seconds")}
                        for g in index["graphs"]
                    },
                }
            },
        )

    def _build_all(
        self,
        job: CompileJob,
        pending: Sequence[_Pending],
        model_config: Mapping[str, Any],
        inductor_config: Mapping[str, Any],
        max_length: int,
        cache_root: Path | None,
    ) -> dict[GraphSpec, tuple[dict[str, Any], float, Path]]:
        workers = max(1, min(job.jobs, len(pending)))
        env = _worker_env(job, cache_root)
        built: dict[GraphSpec, tuple[dict[str, Any], float, Path]] = {}
        failures: list[CompileError] = []
        cancel = threading.Event()
        procs: set[subprocess.Popen[bytes]] = set()
        lock = threading.Lock()

        def run(item: _Pending) -> tuple[dict[str, Any], float, Path]:
            if cancel.is_set():
                msg = f"graph {item.graph.name}: not compiled (an earlier graph failed)"
                raise CompileError(msg)
            task = job.progress.task(f"graph {item.graph.name}")
            try:
                meta, seconds = _run_worker(job, item, env, max_length, inductor_config, procs, lock)
            except CompileError:
                task.done("failed")
                raise
            entry = _publish(item, cache_root, meta)
            task.done(f"{seconds:.1f} s")
            return meta, seconds, entry

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="neuronc-graph") as pool:
            futures = {pool.submit(run, item): item for item in pending}
            try:
                for future in concurrent.futures.as_completed(futures):
                    item = futures[future]
                    try:
                        built[item.graph] = future.result()
                    except CompileError as exc:
                        cancel.set()
                        failures.append(exc)
            except BaseException:
                cancel.set()
                with lock:
                    for proc in procs:
                        with contextlib.suppress(OSError):
                            proc.terminate()
                raise
        if failures:
            real = [f for f in failures if f.log_path] or failures
            raise real[0]
        return built

    # -- run -------------------------------------------------------------------------------------
    def load(self, bundle_dir: str | os.PathLike[str], *, warmup: bool = True) -> InductorRunner:
        """Load a bundle for generation (imports torch); see ``_inductor_runtime.load``."""
        from neuronc.backends._inductor_runtime import load

        return load(bundle_dir, warmup=warmup)

    def load_snippet(self, bundle_dir: str) -> str | None:
        return (
            "from neuronc.runtime import load\n"
            f"runner = load({bundle_dir!r})\n"
            "result = runner.generate('Hello', max_new_tokens=20)\n"
            "print(result.text, result.ttft_ms, result.ms_per_token)\n"
        )


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _check_options(spec: BuildSpec) -> None:
    """The profile loader checks the same; this guards BuildSpecs made in Python."""
    problems = []
    try:
        InductorOptions.model_validate(spec.options)
    except ValidationError as exc:
        problems += [f"options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    if spec.compiler_flags:
        problems.append(
            "compiler.flags: the inductor backend takes no compiler flags; "
            "set Inductor options under options.inductor_config instead"
        )
    if problems:
        raise InvalidInputError("invalid options for the inductor backend", details=problems)


def _read_model_config(checkpoint_dir: Path) -> dict[str, Any]:
    path = checkpoint_dir / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no config.json in the checkpoint") from None
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{path}: unreadable config.json: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidInputError(f"{path}: config.json is not an object")
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        msg = f"model_type {model_type!r} is not supported by the inductor backend"
        raise InvalidInputError(msg, hint=f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return config


def _worker_env(job: CompileJob, cache_root: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    inductor_cache = cache_root / "torchinductor" if cache_root is not None else job.work_dir / "torchinductor"
    # Not setdefault: torch writes its default into os.environ once Inductor runs in this process.
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    env.update(job.env)
    # One graph per process and several processes in parallel: keep each process single-threaded.
    env["OMP_NUM_THREADS"] = "1"
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run_worker(
    job: CompileJob,
    item: _Pending,
    env: Mapping[str, str],
    max_length: int,
    inductor_config: Mapping[str, Any],
    procs: set[subprocess.Popen[bytes]],
    lock: threading.Lock,
) -> tuple[dict[str, Any], float]:
    """Export + compile one graph in a child process; its output goes to the graph's log."""
    graph = item.graph
    item.out_dir.mkdir(parents=True, exist_ok=True)
    request = {
        "model_dir": str(job.checkpoint_dir.resolve()),
        "role": graph.role,
        "batch": graph.batch,
        "bucket": graph.bucket,
        "max_length": max_length,
        "dtype": job.spec.dtype,
        "out_dir": str(item.out_dir.resolve()),
        "name": graph.name,
        "inductor_config": dict(inductor_config),
    }
    request_path = item.out_dir / "request.json"
    request_path.write_text(json.dumps(request, indent=2), encoding="utf-8")
    command = [sys.executable, "-m", "neuronc.backends._inductor_worker", str(request_path)]
    bundle_log = job.logs_dir / f"{graph.name}.log"
    started = time.perf_counter()
    with item.log_path.open("wb") as log:
        log.write(f"# neuronc inductor: graph {graph.name}, cache key {item.key}\n".encode())
        log.write(f"# TORCHINDUCTOR_CACHE_DIR={env.get('TORCHINDUCTOR_CACHE_DIR')}\n".encode())
        log.flush()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=str(item.out_dir))
        with lock:
            procs.add(proc)
        try:
            rc = proc.wait()
        finally:
            with lock:
                procs.discard(proc)
        seconds = time.perf_counter() - started
        log.write(f"# exit status {rc} after {seconds:.2f} s\n".encode())
    shutil.copyfile(item.log_path, bundle_log)
    meta_path = item.out_dir / f"{graph.name}.json"
    if rc != 0 or not meta_path.is_file():
        tail = log_tail(bundle_log, _LOG_TAIL_LINES)
        shutil.rmtree(item.out_dir, ignore_errors=True)
        msg = f"graph {graph.name}: export/AOTInductor compile failed (exit status {rc})"
        raise CompileError(msg, details=tail, log_path=str(bundle_log), hint=f"full compiler output: {bundle_log}")
    meta: dict[str, Any] = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["cache_key"] = item.key
    meta["built_seconds"] = round(seconds, 3)
    meta["package_sha256"] = _sha256_file(item.out_dir / f"{graph.name}.pt2")
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    request_path.unlink(missing_ok=True)
    return meta, seconds


def _publish(item: _Pending, cache_root: Path | None, meta: Mapping[str, Any]) -> Path:
    """Move a freshly built graph into the cache (atomically); return where its files now are."""
    if cache_root is None:
        return item.out_dir
    entry = cache_root / item.key[:2] / item.key
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(item.out_dir, entry)
    except OSError:
        # Another build published the same key first, or a broken entry is in the way.
        if _cached_entry(entry, item.graph.name, item.key) is None:
            trash = cache_root / "tmp" / f"trash-{secrets.token_hex(6)}"
            with contextlib.suppress(OSError):
                os.rename(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
            try:
                os.rename(item.out_dir, entry)
            except OSError:
                return item.out_dir
        else:
            shutil.rmtree(item.out_dir, ignore_errors=True)
    return entry


def _install(entry: Path, name: str, job: CompileJob, *, cache_hit: bool, key: str) -> None:
    """Copy one graph's files from the cache (or the work dir) into the bundle."""
    for file_name in _graph_files(name):
        shutil.copyfile(entry / file_name, job.artifacts_dir / file_name)
    log = job.logs_dir / f"{name}.log"
    if cache_hit:
        cached_log = entry / f"{name}.log"
        header = f"# neuronc inductor: graph {name} reused from the graph cache ({entry}), key {key}\n"
        body = cached_log.read_text(encoding="utf-8", errors="replace") if cached_log.is_file() else ""
        log.write_text(header + body, encoding="utf-8")


def _sweep_tmp(tmp: Path, max_age_seconds: float = 24 * 3600) -> None:
    """Remove what killed builds left in the cache's tmp/ (a day old: no live build is that slow)."""
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > max_age_seconds:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def _check_weights(job: CompileJob, metas: Sequence[Mapping[str, Any]]) -> None:
    """Fail the compile now if the bundle's weights cannot bind every graph constant."""
    directory = job.weights_dir if job.weights_dir is not None else job.checkpoint_dir
    files = weight_files(directory) if directory.is_dir() else []
    if not files:
        msg = f"no safetensors weights in {directory} to bind the compiled graphs to"
        raise CompileError(msg, hint="the inductor backend needs safetensors weights (weights: presharded)")
    headers: dict[str, Any] = {}
    for path in files:
        try:
            headers.update(safetensors_header(path))
        except (OSError, ValueError) as exc:
            raise CompileError(f"cannot read weights {path}: {exc}") from None
    problems: list[str] = []
    for meta in metas:
        problems += [f"{meta['name']}: {p}" for p in missing_constants(meta, headers)]
    if problems:
        msg = f"the weights in {directory} do not cover the compiled graphs' constants"
        raise CompileError(msg, details=problems[:_LOG_TAIL_LINES])


def _write_index(
    job: CompileJob,
    graphs: Sequence[CompiledGraph],
    metas: Mapping[GraphSpec, Mapping[str, Any]],
    keys: Mapping[GraphSpec, str],
    toolchain: Mapping[str, str | None],
    model_config: Mapping[str, Any],
) -> dict[str, Any]:
    spec = job.spec
    entries = []
    for compiled in graphs:
        graph = compiled.graph
        meta = metas[graph]
        package, meta_name, constants = _graph_files(graph.name)
        entries.append(
            {
                "name": graph.name,
                "role": graph.role,
                "batch": graph.batch,
                "bucket": graph.bucket,
                "package": package,
                "meta": meta_name,
                "constants": constants,
                "cache_key": keys[graph],
                "cache_hit": compiled.cache_hit,
                "export_seconds": meta.get("export_seconds"),
                "aoti_seconds": meta.get("aoti_seconds"),
                "built_seconds": meta.get("built_seconds"),
            }
        )
    index = {
        "format": GRAPH_FORMAT,
        "backend": "inductor",
        "model_type": model_config.get("model_type"),
        "dtype": spec.dtype,
        "batch_size": spec.batch_size,
        "max_length": spec.sequence.max_length,
        "context_buckets": sorted(g.bucket for g in job.plan.graphs if g.role == ROLE_CONTEXT),
        "token_buckets": sorted(g.bucket for g in job.plan.graphs if g.role == ROLE_TOKEN),
        "toolchain": dict(toolchain),
        "graphs": entries,
    }
    (job.artifacts_dir / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return index
