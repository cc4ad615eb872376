"""Compile one inductor graph in its own process: ``python -m neuronc.backends.inductor.worker REQUEST``.

``REQUEST`` is a JSON file written by ``InductorBackend.compile`` (model_dir, role, batch, bucket,
max_length, dtype, out_dir, name, inductor_config). The worker writes ``<name>.pt2``,
``<name>.constants.safetensors`` and, last, ``<name>.json`` into ``out_dir``; its stdout and stderr
are the graph's compile log. Exit status 0 means all three files are complete.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m neuronc.backends.inductor.worker REQUEST.json\n")
        return 2
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    started = time.perf_counter()
    print(f"[neuronc] compiling {request['name']}: {json.dumps(request, sort_keys=True)}", flush=True)
    try:
        import torch

        torch.set_num_threads(1)
        from neuronc.backends.inductor import graphs

        imported = time.perf_counter() - started
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
        meta["import_seconds"] = round(imported, 3)
        tmp = out_dir / f"{request['name']}.json.tmp"
        graphs.write_json(tmp, meta)
        tmp.replace(out_dir / f"{request['name']}.json")
    except Exception:  # the process boundary: any failure is logged and becomes exit status 1
        traceback.print_exc()
        print(f"[neuronc] FAILED after {time.perf_counter() - started:.2f} s", flush=True)
        return 1
    timings = (
        f"imports {meta['import_seconds']} s, export {meta['export_seconds']} s, AOTInductor {meta['aoti_seconds']} s"
    )
    print(f"[neuronc] done in {time.perf_counter() - started:.2f} s ({timings})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
