"""Compile inductor graphs in one process: ``python -m neuronc.backends.inductor.worker REQUESTS [PARALLEL]``.

``REQUESTS`` is a JSON file written by ``build.build_all``: a list of graph requests (model_dir, role,
batch, bucket, max_length, dtype, out_dir, name, inductor_config, log), in the order to start them.
torch, transformers and the model are loaded once, by this process, for every graph.

With ``PARALLEL`` > 1 (on Linux, while this process has a single thread) the process exports each
graph itself and forks a child to AOT-compile it, at most ``PARALLEL`` children at a time: the
children share the parent's imports and model (copy-on-write), so a graph costs its own export and
compile, not another ``import torch``. Otherwise the graphs are exported and compiled one after the
other in this process.

For each graph the output goes to that graph's ``log`` (file descriptors 1 and 2 are pointed at it,
so the C++ compiler's output lands there too); the graph's ``out_dir`` receives ``<name>.pt2``,
``<name>.constants.safetensors`` and, last, ``<name>.json``: a graph whose ``.json`` exists is
complete, and the parent takes it as soon as it appears. A graph that fails gets ``<name>.failed``
(its exit status) instead; the process then stops the children still running, starts no other
graph, and exits with status 1.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neuronc.backends.inductor.graphs import ExportedGraph


def _log_to(path: str) -> None:
    """Send this process's stdout and stderr (the file descriptors too) to ``path`` from now on."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


class _Models:
    """The HF model each graph is exported from, built once per (model directory, dtype)."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, str], Any] = {}

    def get(self, model_dir: str, dtype_name: str) -> Any:
        from neuronc.backends.inductor import graphs

        key = (model_dir, dtype_name)
        if key not in self._built:
            self._built[key] = graphs.build_model(graphs.load_config(Path(model_dir)), graphs.DTYPES[dtype_name])
        return self._built[key]


def _export(request: dict[str, Any], models: _Models) -> ExportedGraph:
    from neuronc.backends.inductor import graphs

    print(f"[neuronc] compiling {request['name']}: {json.dumps(request, sort_keys=True)}", flush=True)
    return graphs.export_graph(
        models.get(request["model_dir"], request["dtype"]),
        role=request["role"],
        batch=int(request["batch"]),
        bucket=int(request["bucket"]),
        max_length=int(request["max_length"]),
        dtype_name=request["dtype"],
        name=request["name"],
    )


def _compile(request: dict[str, Any], exported: ExportedGraph, started: float, imported: float) -> None:
    from neuronc.backends.inductor import graphs

    out_dir = Path(request["out_dir"])
    meta = graphs.compile_exported(exported, out_dir, request.get("inductor_config") or {})
    meta["import_seconds"] = round(imported, 3)
    meta["worker_seconds"] = round(time.perf_counter() - started, 3)
    timings = (
        f"imports {meta['import_seconds']} s, export {meta['export_seconds']} s, AOTInductor {meta['aoti_seconds']} s"
    )
    print(f"[neuronc] done in {meta['worker_seconds']:.2f} s ({timings})", flush=True)
    tmp = out_dir / f"{request['name']}.json.tmp"
    graphs.write_json(tmp, meta)
    tmp.replace(out_dir / f"{request['name']}.json")


# Inductor's compile modules, imported here once before the first fork so that the children share
# them instead of each importing them at its first compile (about 180 modules; measured on the demo,
# 0.8 s here against 2.6 s less in each child). Nothing in them is called: the names are private to
# torch, so a torch that moves one loses only this preload (the ImportError is ignored), never the
# compile; tests/test_inductor.py checks that the installed torch still has every one.
SHARED_IMPORTS = (
    "torch._inductor.compile_fx",
    "torch._inductor.codegen.cpp",
    "torch._inductor.codegen.cpp_wrapper_cpu",
    "torch._inductor.cpp_builder",
)


def _preload() -> None:
    for name in SHARED_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _can_fork() -> bool:
    """Forking is safe here only on Linux with no other thread (a forked child would lack it)."""
    if sys.platform != "linux" or threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1  # native threads too (OpenMP, tokenizers)
    except OSError:
        return False


class _Scheduler:
    """Exports every graph in this process and compiles it in a forked child, ``parallel`` at a
    time; with ``parallel`` 1, or where forking is unsafe, compiles it here, one after the other."""

    def __init__(self, parallel: int, imported: float, first: float) -> None:
        self.parallel = parallel
        self.imported = imported
        self.first = first
        self.models = _Models()
        self.running: dict[int, tuple[dict[str, Any], float]] = {}
        self.failed = False

    def run(self, requests: list[dict[str, Any]]) -> int:
        try:
            for index, request in enumerate(requests):
                while len(self.running) >= self.parallel and not self.failed:
                    self._reap()
                if self.failed:
                    break
                self._start(request, self.first if index == 0 else time.perf_counter(), index == 0)
            if self.failed:
                for pid in self.running:
                    os.kill(pid, signal.SIGTERM)
            while self.running:
                self._reap()
        finally:
            for pid in self.running:  # interrupted: the children go too
                os.kill(pid, signal.SIGKILL)
        return 1 if self.failed else 0

    def _start(self, request: dict[str, Any], started: float, first: bool) -> None:
        imported = self.imported if first else 0.0
        _log_to(request["log"])
        try:
            exported = _export(request, self.models)
            if self.parallel == 1 or not _can_fork():
                _compile(request, exported, started, imported)
                return
        except Exception:  # the process boundary: any failure is logged and ends the graphs
            traceback.print_exc()
            self._fail(request, 1, started)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            # The child ends here, without this process's exit handlers (os._exit): they are ours.
            os._exit(_child(request, exported, started, imported))
        self.running[pid] = (request, started)

    def _reap(self) -> None:
        pid, status = os.wait()
        if pid not in self.running:  # not one of ours (a process a library started and left)
            return
        request, started = self.running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and not self.failed:
            _log_to(request["log"])
            self._fail(request, code, started)

    def _fail(self, request: dict[str, Any], status: int, started: float) -> None:
        """Record in the graph's log and its ``<name>.failed`` marker that it failed."""
        self.failed = True
        print(f"[neuronc] FAILED after {time.perf_counter() - started:.2f} s", flush=True)
        marker = Path(request["out_dir"]) / f"{request['name']}.failed"
        marker.write_text(f"{status}\n", encoding="utf-8")


def _child(request: dict[str, Any], exported: ExportedGraph, started: float, imported: float) -> int:
    """A forked child: compile one exported graph; its exit status says whether it worked."""
    _log_to(request["log"])
    try:
        _compile(request, exported, started, imported)
    except BaseException:  # the process boundary: the failure is logged, the status tells the parent
        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        sys.stderr.write("usage: python -m neuronc.backends.inductor.worker REQUESTS.json [PARALLEL]\n")
        return 2
    loaded = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    requests: list[dict[str, Any]] = loaded if isinstance(loaded, list) else [loaded]
    parallel = max(1, int(argv[1])) if len(argv) == 2 else 1
    first = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    from neuronc.backends.inductor import graphs  # noqa: F401  (timed as the imports)

    parallel = min(parallel, len(requests))
    if parallel > 1:
        _preload()
    imported = time.perf_counter() - first
    return _Scheduler(parallel, imported, first).run(requests)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
