"""Register test backends at run time, as an installed plugin's ``neuronc.backends`` entry point would appear.

Test code only: the package itself learns backends from entry points (``neuronc.backends``).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from neuronc.backends import ENTRY_POINT_GROUP, _entry_points, get_backend


def register_backend(name: str, value: str) -> None:
    """Add the entry point ``name = value`` ("module:Class") to the registry."""
    _entry_points()[name] = EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
    get_backend.cache_clear()


def unregister_backend(name: str) -> None:
    _entry_points().pop(name, None)
    get_backend.cache_clear()
