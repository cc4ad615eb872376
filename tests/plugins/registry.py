"""Install test backends at run time the way a plugin package is installed: as a distribution.

``register_backend`` writes a ``neuronc_test_plugins-0.dist-info`` directory (METADATA and an
``entry_points.txt`` with a ``[neuronc.backends]`` section) into a directory of this process's own
on ``sys.path``; ``importlib.metadata`` finds it there as it finds any installed package, and
``neuronc.backends.reload_entry_points()`` (public) makes the registry read the entry points again.
Nothing here touches the registry's internals.

Test code only. Each process has its own directory, so parallel workers and the subprocesses that
register the same backends do not see one another's.
"""

from __future__ import annotations

import atexit
import importlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from neuronc.backends import ENTRY_POINT_GROUP, reload_entry_points

DIST = "neuronc_test_plugins-0.dist-info"
_site: Path | None = None
_registered: dict[str, str] = {}


def _site_dir() -> Path:
    global _site
    if _site is None:
        _site = Path(tempfile.mkdtemp(prefix="neuronc-test-plugins-"))
        atexit.register(shutil.rmtree, _site, True)
        (_site / DIST).mkdir()
        (_site / DIST / "METADATA").write_text("Metadata-Version: 2.1\nName: neuronc-test-plugins\nVersion: 0\n")
    if str(_site) not in sys.path:
        sys.path.append(str(_site))
    return _site


def _install(backends: dict[str, str]) -> None:
    """Make the test distribution declare exactly ``backends`` (name -> "module:Class")."""
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{name} = {value}" for name, value in sorted(backends.items()))]
    (_site_dir() / DIST / "entry_points.txt").write_text("\n".join(lines) + "\n")
    _registered.clear()
    _registered.update(backends)
    importlib.invalidate_caches()
    reload_entry_points()


def register_backend(name: str, value: str) -> None:
    """Declare the entry point ``name = value`` ("module:Class"), as an installed plugin would."""
    if _registered.get(name) != value:
        _install({**_registered, name: value})


def unregister_backend(name: str) -> None:
    if name in _registered:
        _install({k: v for k, v in _registered.items() if k != name})


def registered() -> dict[str, str]:
    """The test backends declared now (for a fixture to restore after a test)."""
    return dict(_registered)


def restore(backends: dict[str, str]) -> None:
    """Back to ``backends`` (from ``registered()``); reads nothing again when nothing changed."""
    if backends != _registered:
        _install(backends)


@contextmanager
def uninstalled() -> Iterator[None]:
    """Only the really installed backends while inside: the test distribution is off ``sys.path``."""
    site = str(_site_dir())
    sys.path.remove(site)
    importlib.invalidate_caches()
    reload_entry_points()
    try:
        yield
    finally:
        if site not in sys.path:
            sys.path.append(site)
        importlib.invalidate_caches()
        reload_entry_points()
