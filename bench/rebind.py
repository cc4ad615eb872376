"""Rebind benchmark: the demo's fine-tune compiled after the demo, against `python -c "import torch"`,
and a warm store hit, all ratios from one run.

Usage: python bench/rebind.py [--runs N]

1. The demo profile compiled into a fresh store (a full first compile: empty store, graph cache off),
   timed once as a whole process.
2. A fine-tune of the demo model (its tensors' values changed in place: the same names, shapes and
   dtypes, as a second training run writes) compiled into that store, with NEURONC_GRAPH_CACHE=off
   so the graphs can only come from the store: a rebind (the report is checked to say so). Each run
   retrains the fine-tune in place first, so every run is a rebind, never a hit. Timed in turn with
   `python -c "import torch"` (A B A B ...), the ratio pair by pair. Target (issue 39): at most 3x.
3. The last fine-tune compiled again: a store hit, timed in turn with `import torch`. Target: at most 0.3x.
Everything is written under a temporary directory and removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _process import timed

ROOT = Path(__file__).resolve().parent.parent
REBIND_TARGET = 3.0
HIT_TARGET = 0.3


def _retrain(model: Path, seed: int) -> None:
    """Rewrite model.safetensors in place with other float32 values (their low mantissa bits, another
    pattern per ``seed`` from 0 to 62): new content, the same layout. The demo model is float32."""
    path = model / "model.safetensors"
    original = model / "original.safetensors.bak"
    if not original.exists():
        shutil.copyfile(path, original)
    data = bytearray(original.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    assert all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__"), "the demo model is fp32"
    mask = seed % 63 + 1
    for i in range(8 + length, len(data) - 3, 4):
        data[i] ^= mask
    path.write_bytes(bytes(data))


def _copy_demo(dest: Path) -> Path:
    shutil.copytree(ROOT / "profiles" / "models" / "tiny-llama", dest / "models" / "tiny-llama")
    shutil.copy(ROOT / "profiles" / "tiny-llama-cpu.yaml", dest / "tiny-llama-cpu.yaml")
    return dest / "tiny-llama-cpu.yaml"


def _status(profile: Path, env: dict[str, str]) -> dict[str, object]:
    cmd = [sys.executable, "-m", "neuronc", "compile", str(profile), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    [build] = json.loads(proc.stdout)["builds"]
    return dict(build)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-rebind-"))
    try:
        _bench(scratch, args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _bench(scratch: Path, runs: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {
        "PYTHONPATH": str(ROOT),
        "NEURONC_STORE": str(scratch / "store"),
        "NEURONC_CACHE_DIR": str(scratch / "cache"),
        "NEURONC_GRAPH_CACHE": "off",
        "TMPDIR": str(scratch / "tmp"),
    }
    (scratch / "tmp").mkdir()
    base = _copy_demo(scratch / "base")
    ft = _copy_demo(scratch / "ft")
    compile_base = [sys.executable, "-m", "neuronc", "compile", str(base)]
    compile_ft = [sys.executable, "-m", "neuronc", "compile", str(ft)]
    torch_cmd = [sys.executable, "-c", "import torch"]

    first_wall, first_cpu = timed(compile_base, env, ROOT)
    print(f"first compile of the demo (graph cache off): {first_wall:.1f} s wall, {first_cpu:.1f} s CPU")
    timed(torch_cmd, env, ROOT)  # warm the page cache for torch
    model = ft.parent / "models" / "tiny-llama"
    _retrain(model, 0)
    first = _status(ft, env)  # also warms neuronc's .pyc files for the rebind path
    assert first["status"] == "rebound", first

    rebind, torch_walls, rebind_ratios = [], [], []
    for run in range(runs):
        _retrain(model, run + 1)
        wall, _ = timed(compile_ft, env, ROOT)
        torch_wall, _ = timed(torch_cmd, env, ROOT)
        rebind.append(wall)
        torch_walls.append(torch_wall)
        rebind_ratios.append(wall / torch_wall)
    last = _status(ft, env)
    assert last["status"] == "hit", last  # the last retrain was rebound by the timed run: now a hit
    hits, hit_ratios = [], []
    for _ in range(runs):
        wall, _ = timed(compile_ft, env, ROOT)
        torch_wall, _ = timed(torch_cmd, env, ROOT)
        hits.append(wall)
        hit_ratios.append(wall / torch_wall)
    stored = sorted((scratch / "store").rglob("manifest.json"))
    rebound = sum(1 for p in stored if '"rebound"' in p.read_text())
    assert rebound == runs + 1, f"{rebound} rebound bundles, expected {runs + 1}: a timed run was not a rebind"
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"import torch:        {statistics.median(torch_walls):.3f} s wall (median of {runs})")
    print(f"rebind (fine-tune):  {statistics.median(rebind):.3f} s wall; ratio {statistics.median(rebind_ratios):.2f}x")
    print(f"store hit:           {statistics.median(hits):.3f} s wall; ratio {statistics.median(hit_ratios):.2f}x")
    print(f"first compile / import torch: {first_wall / statistics.median(torch_walls):.1f}x")
    print(f"bundles in the store: {len(stored)} ({rebound} rebound)")
    ok_rebind = statistics.median(rebind_ratios) <= REBIND_TARGET
    ok_hit = statistics.median(hit_ratios) <= HIT_TARGET
    print(f"target: rebind <= {REBIND_TARGET}x import torch: {'PASS' if ok_rebind else 'FAIL'}")
    print(f"target: store hit <= {HIT_TARGET}x import torch: {'PASS' if ok_hit else 'FAIL'}")


if __name__ == "__main__":
    main()
