"""Shared fixtures of the adversarial suite: small file systems for the full-disk cases."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount small tmpfs file systems under tmp_path (unmounted afterwards); skip where mounting is not allowed."""
    mounted: list[Path] = []

    def mount(size: int, inodes: int | None = None, read_only: bool = False) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "") + (",ro" if read_only else "")
        try:
            proc = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True
            )
        except FileNotFoundError:
            pytest.skip("full-disk cases need a small tmpfs, and there is no mount command here")
        if proc.returncode != 0:
            reason = (proc.stderr or proc.stdout).strip().splitlines()
            pytest.skip(f"full-disk cases need a small tmpfs; mounting one is not permitted here: {reason[-1:]}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def tiny_disk(small_fs: Callable[..., Path]) -> Path:
    """One 1 MiB tmpfs."""
    return small_fs(1024 * 1024)
