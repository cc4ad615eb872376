"""What the benches share: one command timed as a whole process (wall clock and the kernel's CPU
accounting of its process tree)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, cpu) seconds of one run of ``cmd``; exits with its stderr's tail if it fails."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{stderr[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime
