"""Weights-key benchmark: hashing a cold multi-GB checkpoint next to `sha256sum` over the same files, and
the warm lookup (every digest known: one stat per file), in one run.

Usage: python bench/hash_weights.py [--gib 2] [--files 4] [--rounds 3]

Writes a checkpoint of ``--files`` safetensors-sized files (``--gib`` GiB in all, random bytes) under
/tmp, then per round, alternating: `sha256sum FILES` (coreutils, one process, as a user would check
them), and `neuronc.keys.local_weight_digests` in a fresh process with an empty digest index (cold:
every byte read and hashed, files in parallel threads). Then the same with the index filled (warm).
The page cache holds the files for both (they were just written), so both are CPU-bound: this
compares hashing, not disks. Reports medians and the ratio cold / sha256sum (target: at most 1.0:
at least as fast as sha256sum). Deletes everything it wrote.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.0
_DIGESTS = "from pathlib import Path; import sys; from neuronc.keys import local_weight_digests; local_weight_digests(Path(sys.argv[1]))"


def _write(directory: Path, total: int, files: int) -> list[Path]:
    directory.mkdir(parents=True)
    block = os.urandom(16 << 20)
    paths = []
    for i in range(files):
        path = directory / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        left = total // files
        with path.open("wb") as f:
            while left > 0:
                chunk = block[: min(left, len(block))]
                f.write(chunk)
                left -= len(chunk)
        paths.append(path)
    return paths


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="neuronc-bench-hash-", dir="/tmp"))
    try:
        model = scratch / "model"
        paths = _write(model, int(args.gib * (1 << 30)), args.files)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        sha, cold, warm = [], [], []
        for i in range(args.rounds):
            sha.append(_wall(["sha256sum", *map(str, paths)], env))
            cache = scratch / f"cache-{i}"
            run_env = {**env, "NEURONC_CACHE_DIR": str(cache)}
            cold.append(_wall([sys.executable, "-c", _DIGESTS, str(model)], run_env))
            warm.append(_wall([sys.executable, "-c", _DIGESTS, str(model)], run_env))
        size = sum(p.stat().st_size for p in paths)
        s, c, w = (statistics.median(x) for x in (sha, cold, warm))
        print(
            f"checkpoint: {len(paths)} files, {size / (1 << 30):.2f} GiB; {os.cpu_count()} cores; median of {args.rounds}"
        )
        print(f"sha256sum:            {s:7.3f} s  ({size / s / (1 << 20):7.0f} MiB/s)")
        print(f"neuronc cold digests: {c:7.3f} s  ({size / c / (1 << 20):7.0f} MiB/s)")
        print(f"neuronc warm digests: {w:7.3f} s  (a stat per file; the process start included)")
        ratio = c / s
        verdict = "ok" if ratio <= TARGET_RATIO else "over target"
        print(f"cold / sha256sum: {ratio:.2f}x (target <= {TARGET_RATIO:.1f}x: {verdict}); warm / cold: {w / c:.3f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
