"""The backend registry reads plugins from installed distributions' entry points, and the suite's
test plugins are installed that way (tests/plugins/registry.py), never put into the registry's cache."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from plugins.registry import register_backend, registered, restore, uninstalled

from neuronc.backends import ENTRY_POINT_GROUP, BackendBase, backend_names, get_backend, is_registered
from neuronc.errors import UnknownBackendError

BUILTIN = {"inductor", "nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"}


def test_a_plugin_distribution_registers_its_backend_and_removing_it_unregisters() -> None:
    before = registered()
    assert "fake" not in backend_names()
    register_backend("fake", "plugins.fake_backend:FakeBackend")
    # A real distribution: importlib.metadata lists its entry point like any installed package's.
    assert "plugins.fake_backend:FakeBackend" in {ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert "fake" in backend_names() and is_registered("fake")
    backend = get_backend("fake")
    assert isinstance(backend, BackendBase) and backend.name == "fake"
    restore(before)
    assert "fake" not in backend_names() and not is_registered("fake")
    with pytest.raises(UnknownBackendError, match="unknown backend 'fake'"):
        get_backend("fake")


def test_without_the_test_distribution_only_installed_backends_are_listed() -> None:
    register_backend("fake", "plugins.fake_backend:FakeBackend")
    with uninstalled():
        names = set(backend_names())
        assert "fake" not in names and names >= BUILTIN
    assert "fake" in backend_names()
