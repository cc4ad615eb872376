"""The backend registry reads plugins from installed distributions' entry points, and the suite's
test plugins are installed that way (tests/plugins/registry.py), never put into the registry's cache."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from plugins.registry import register_backend, registered, restore, uninstalled

from neuronc.backends import ENTRY_POINT_GROUP, BackendBase, backend_names, get_backend, is_registered
from neuronc.errors import UnknownBackendError

NAME = "registry-test"  # a name no other test registers (some register "fake" for the whole session)
BUILTIN = {"inductor", "nxdi", "optimum-neuron", "transformers-neuronx", "torch-neuronx"}


def test_a_plugin_distribution_registers_its_backend_and_removing_it_unregisters() -> None:
    before = registered()
    assert NAME not in backend_names()
    register_backend(NAME, "plugins.fake_backend:FakeBackend")
    # A real distribution: importlib.metadata lists its entry point like any installed package's.
    assert NAME in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert NAME in backend_names() and is_registered(NAME)
    backend = get_backend(NAME)
    assert isinstance(backend, BackendBase) and backend.name == "fake"
    restore(before)
    assert NAME not in backend_names() and not is_registered(NAME)
    with pytest.raises(UnknownBackendError, match=f"unknown backend '{NAME}'"):
        get_backend(NAME)


def test_without_the_test_distribution_only_installed_backends_are_listed() -> None:
    register_backend(NAME, "plugins.fake_backend:FakeBackend")
    with uninstalled():
        names = set(backend_names())
        assert NAME not in names and names >= BUILTIN
    assert NAME in backend_names()
