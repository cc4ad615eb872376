"""`store publish` and `compile --out` read no file past the size its manifest declares.

A bundle file that grew after the manifest was written (here: a sparse file of 4 GiB where the
manifest says a few bytes) used to be copied to its end into the store's staging area: a 6.5 MiB
bundle wrote 1.3 GB in 5 s before the hash check refused it. The copy now stops one byte past the
declared size, as ``verify`` does, and refuses the file (exit 4, naming it) with nothing staged.

The child process runs with a 64 MiB file-size limit (RLIMIT_FSIZE), so a copy that does not stop
is cut short by the kernel instead of filling the test machine's disk.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _bundles import text, write_bundle

GROWN = 4 * 1024**3
FSIZE_LIMIT = 64 * 1024 * 1024


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))


def _neuronc(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "neuronc", *map(str, args)],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=300,
        preexec_fn=_limited,
    )


def _grown_bundle(tmp_path: Path) -> tuple[Path, str]:
    bundle = write_bundle(tmp_path / "bundle", "nxdi")
    grown = "artifacts/model.pt"
    os.truncate(bundle / grown, GROWN)  # sparse: no disk space used, 4 GiB of zeros to whoever reads it
    return bundle, grown


def _staged_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def test_store_publish_stops_at_the_declared_size(tmp_path: Path) -> None:
    bundle, grown = _grown_bundle(tmp_path)
    store = tmp_path / "store"
    start = time.monotonic()
    proc = _neuronc("store", "publish", bundle, "--store", store, "--json", cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == 4, (proc.returncode, text(proc))  # -25: killed by SIGXFSZ past 64 MiB
    error = json.loads(proc.stdout)
    assert grown in error["message"], error
    assert "Traceback" not in proc.stderr.decode()
    assert _staged_bytes(store / ".staging") == 0, sorted(store.rglob("*"))
    assert not [p for p in store.rglob("manifest.json")], "nothing published"
    assert elapsed < 60, elapsed


def test_compile_out_copy_stops_at_the_declared_size(tmp_path: Path) -> None:
    """``place_bundle`` (compile --out) copies through the same function: the same limit."""
    bundle, grown = _grown_bundle(tmp_path)
    code = (
        "import sys\n"
        "from neuronc.bundle import copy_bundle\n"
        "from neuronc.errors import NeuroncError\n"
        "try:\n"
        "    copy_bundle(sys.argv[1], sys.argv[2])\n"
        "except NeuroncError as exc:\n"
        "    print(exc.message); sys.exit(exc.exit_code)\n"
    )
    dest = tmp_path / "out" / "bundle"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(bundle), str(dest)],
        capture_output=True,
        timeout=300,
        preexec_fn=_limited,
        cwd=tmp_path,
    )
    assert proc.returncode == 4, (proc.returncode, text(proc))
    assert grown in proc.stdout.decode()
    assert not dest.exists()
    assert _staged_bytes(tmp_path / "out") == 0, sorted((tmp_path / "out").rglob("*"))
