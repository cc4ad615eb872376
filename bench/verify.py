"""Benchmark `verify` hashing throughput against `sha256sum` on the same files, in the same run.

    python bench/verify.py                 # a 3 GiB bundle in a temporary directory
    python bench/verify.py --size-gb 8 --files 16 --repeat 5 --json

Builds a bundle with the real BundleWriter (shard-like files plus small artifacts), reads every file
once so both tools hash from the page cache, then alternates `sha256sum FILES...` (one process, as
people run it), `xargs -P N sha256sum` (parallel, for reference), `verify_bundle(jobs=1)` and
`verify_bundle(jobs=N)`. Prints median throughputs and the ratio verify / sha256sum (target >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from neuronc.bundle import BuildRecord, BundleWriter, verify_bundle

BLOCK = 16 * 1024 * 1024


def build(dest: Path, size: int, files: int) -> tuple[list[Path], int]:
    """A bundle of ``files`` shards sharing ``size`` bytes, plus a few small artifacts."""
    block = bytearray(os.urandom(BLOCK))
    per_file = size // files
    with BundleWriter(dest) as writer:
        for i in range(files):
            with writer.open(f"weights/rank{i}.safetensors", "weights") as f:
                written = 0
                while written < per_file:
                    n = min(BLOCK, per_file - written)
                    block[:8] = (written + i).to_bytes(8, "little")  # no two blocks alike
                    f.write(memoryview(block)[:n])
                    written += n
        for i in range(8):
            writer.write_bytes(f"artifacts/graph{i}.neff", os.urandom(256 * 1024))
        writer.write_text("model/config.json", "{}\n")
        record = BuildRecord(
            backend="bench",
            target="cpu",
            profile={"model": {"id": "bench/model"}},
            config_hash="0" * 64,
            hashed_fields=(),
            hashed_inputs={},
            toolchain={},
        )
        path = writer.finish(record)
    paths = sorted(p for p in path.rglob("*") if p.is_file())
    return paths, sum(p.stat().st_size for p in paths)


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=3.0, help="bundle size in GiB (default 3)")
    parser.add_argument("--files", type=int, default=12, help="number of shard files (default 12)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="verify threads / parallel sha256sum")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool; medians are reported")
    parser.add_argument("--dir", type=Path, default=None, help="where to build (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the bundle afterwards")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    if shutil.which("sha256sum") is None:
        sys.exit("sha256sum not found (coreutils)")

    base = Path(tempfile.mkdtemp(prefix="neuronc-bench-", dir=args.dir))
    try:
        t = time.perf_counter()
        paths, total = build(base / "bundle", int(args.size_gb * 1024**3), args.files)
        build_s = time.perf_counter() - t
        bundle = base / "bundle"
        names = [str(p) for p in paths]
        for p in paths:  # warm the page cache so both tools read memory, not disk
            with p.open("rb") as f:
                while f.read(BLOCK):
                    pass

        def sha256sum() -> None:
            subprocess.run(["sha256sum", *names], check=True, stdout=subprocess.DEVNULL)

        def sha256sum_parallel() -> None:
            subprocess.run(
                ["xargs", "-0", "-P", str(args.jobs), "-n", "1", "sha256sum"],
                input="\0".join(names).encode(),
                check=True,
                stdout=subprocess.DEVNULL,
            )

        def verify(jobs: int) -> None:
            report = verify_bundle(bundle, jobs=jobs)
            assert report.ok, report.problems()

        runs: dict[str, list[float]] = {"sha256sum": [], "sha256sum -P": [], "verify -j1": [], "verify": []}
        for _ in range(args.repeat):
            runs["sha256sum"].append(timed(sha256sum))
            runs["verify"].append(timed(lambda: verify(args.jobs)))
            runs["sha256sum -P"].append(timed(sha256sum_parallel))
            runs["verify -j1"].append(timed(lambda: verify(1)))
        mbps = {k: total / statistics.median(v) / 1e6 for k, v in runs.items()}
        result = {
            "bytes": total,
            "files": len(paths),
            "jobs": args.jobs,
            "cpus": os.cpu_count(),
            "build_seconds": round(build_s, 2),
            "build_MBps": round(total / build_s / 1e6, 1),
            "median_seconds": {k: round(statistics.median(v), 3) for k, v in runs.items()},
            "MBps": {k: round(v, 1) for k, v in mbps.items()},
            "ratio_verify_vs_sha256sum": round(mbps["verify"] / mbps["sha256sum"], 3),
            "ratio_verify_j1_vs_sha256sum": round(mbps["verify -j1"] / mbps["sha256sum"], 3),
            "ratio_verify_vs_parallel_sha256sum": round(mbps["verify"] / mbps["sha256sum -P"], 3),
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(
                f"bundle: {total / 1024**3:.2f} GiB in {len(paths)} files, built in {build_s:.1f} s "
                f"({result['build_MBps']} MB/s, hashed while written)"
            )
            for k, v in mbps.items():
                print(f"  {k:14s} {v:8.1f} MB/s   (median of {args.repeat}: {result['median_seconds'][k]} s)")
            print(f"verify / sha256sum           = {result['ratio_verify_vs_sha256sum']}x  (target >= 0.9)")
            print(f"verify -j1 / sha256sum       = {result['ratio_verify_j1_vs_sha256sum']}x")
            print(f"verify / sha256sum -P{args.jobs:<2d}     = {result['ratio_verify_vs_parallel_sha256sum']}x")
    finally:
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
