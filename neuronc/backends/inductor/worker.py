"""Compile inductor graphs in one process: ``python -m neuronc.backends.inductor.worker REQUESTS``.

``REQUESTS`` is a JSON file written by ``InductorBackend.compile``: a list of graph requests
(model_dir, role, batch, bucket, max_length, dtype, out_dir, name, inductor_config, log), compiled
one after the other. One process compiles several graphs so that torch, transformers and
Inductor are imported once, and Inductor's in-process caches (the CPU ISA it picked, its compiled
headers, the model it traced) serve every graph after the first.

For each graph the process's stdout and stderr go to that graph's ``log`` (file descriptors 1 and 2
are pointed at it, so the C++ compiler's output lands there too); the worker writes ``<name>.pt2``,
``<name>.constants.safetensors`` and, last, ``<name>.json`` into the graph's ``out_dir``: a graph
whose ``.json`` exists is complete, and the parent takes it as soon as it appears. The first graph
that fails ends the process with exit status 1 (the graphs after it are not compiled).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any


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


def _compile_one(request: dict[str, Any], started: float, imported: float | None) -> None:
    from neuronc.backends.inductor import graphs

    out_dir = Path(request["out_dir"])
    meta = graphs.compile_graph(
        model_dir=Path(request["model_dir"]),
        role=request["role"],
        batch=int(request["batch"]),
        bucket=int(request["bucket"]),
        max_length=int(request["max_length"]),
        dtype_name=request["dtype"],
        out_dir=out_dir,
        name=request["name"],
        inductor_config=request.get("inductor_config") or {},
    )
    meta["import_seconds"] = round(imported, 3) if imported is not None else 0.0
    meta["worker_seconds"] = round(time.perf_counter() - started, 3)
    timings = (
        f"imports {meta['import_seconds']} s, export {meta['export_seconds']} s, AOTInductor {meta['aoti_seconds']} s"
    )
    print(f"[neuronc] done in {meta['worker_seconds']:.2f} s ({timings})", flush=True)
    tmp = out_dir / f"{request['name']}.json.tmp"
    graphs.write_json(tmp, meta)
    tmp.replace(out_dir / f"{request['name']}.json")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m neuronc.backends.inductor.worker REQUESTS.json\n")
        return 2
    loaded = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    requests: list[dict[str, Any]] = loaded if isinstance(loaded, list) else [loaded]
    imported: float | None = None
    for request in requests:
        started = time.perf_counter()
        if request.get("log"):
            _log_to(request["log"])
        print(f"[neuronc] compiling {request['name']}: {json.dumps(request, sort_keys=True)}", flush=True)
        try:
            if imported is None:
                import torch

                torch.set_num_threads(1)
                from neuronc.backends.inductor import graphs  # noqa: F401  (timed as the imports)

                imported = time.perf_counter() - started
                _compile_one(request, started, imported)
            else:
                _compile_one(request, started, None)
        except Exception:  # the process boundary: any failure is logged and becomes exit status 1
            traceback.print_exc()
            print(f"[neuronc] FAILED after {time.perf_counter() - started:.2f} s", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
