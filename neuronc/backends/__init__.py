"""Backend registry, fed by the entry-point group ``neuronc.backends``.

Built-in backends are registered in neuronc's own pyproject.toml through the same group that
third-party packages use. Listing names reads package metadata only; ``get_backend`` imports exactly
one backend module (and backend modules keep their SDK imports inside methods).
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Protocol

from neuronc.backends.base import Availability, Backend, BackendBase, CompilePlan, GraphSpec
from neuronc.errors import UnknownBackendError

ENTRY_POINT_GROUP = "neuronc.backends"

# The same table pyproject.toml registers. It lets `python -m neuronc` run from a source tree that was
# never installed (no dist metadata), and it is the fast path: a built-in name is found without
# scanning every installed distribution's entry points (a store-hit compile never scans). A
# plugin cannot take a built-in backend's name.
_BUILTIN = {
    "inductor": "neuronc.backends.inductor.backend:InductorBackend",
    "nxdi": "neuronc.backends.neuron.nxdi:NxdiBackend",
    "optimum-neuron": "neuronc.backends.neuron.optimum_neuron:OptimumNeuronBackend",
    "transformers-neuronx": "neuronc.backends.neuron.transformers_neuronx:TransformersNeuronxBackend",
    "torch-neuronx": "neuronc.backends.neuron.torch_neuronx:TorchNeuronxBackend",
    "vllm-neuron": "neuronc.backends.vllm_neuron.backend:VllmNeuronBackend",
}


@cache
def _entry_points() -> dict[str, EntryPoint]:
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name, value in _BUILTIN.items():
        found[name] = EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
    return found


def is_registered(name: str) -> bool:
    """Whether a backend of this name exists (built-in names without reading package metadata)."""
    return name in _BUILTIN or name in _entry_points()


def backend_names() -> list[str]:
    """Every registered backend name, sorted; imports no backend."""
    return sorted(_entry_points())


def entry_point_value(name: str) -> str:
    """Where a backend lives ("module:Class"), without importing it."""
    return _entry_points()[name].value


def unknown_backend_message(name: str) -> tuple[str, str]:
    names = backend_names()
    close = difflib.get_close_matches(name, names, n=1)
    suggestion = f" Did you mean '{close[0]}'?" if close else ""
    return f"unknown backend '{name}'.{suggestion}", "known backends: " + ", ".join(names)


@cache
def get_backend(name: str) -> Backend:
    """Instantiate one backend by name; raises UnknownBackendError with a suggestion."""
    if name in _BUILTIN:
        entry = EntryPoint(name=name, value=_BUILTIN[name], group=ENTRY_POINT_GROUP)
    else:
        eps = _entry_points()
        if name not in eps:
            message, hint = unknown_backend_message(name)
            raise UnknownBackendError(message, hint=hint)
        entry = eps[name]
    backend_cls = entry.load()
    backend: Backend = backend_cls()
    return backend


class NamesBackend(Protocol):
    """What a process boundary hands over: a manifest, a spec or a job naming its backend."""

    @property
    def backend(self) -> str: ...


def resolve_backend(named: NamesBackend | str) -> Backend:
    """The Backend a name read across a process boundary stands for.

    A build's backend is looked up once, where its profile is loaded, and travels in its typed
    ``neuronc.build.Build``; outside this package and the CLI, only ``Build.received`` (a spec that
    arrived as JSON) and ``backend_for_manifest`` (a bundle read from disk) call this.
    """
    return get_backend(named if isinstance(named, str) else named.backend)


def backend_for_manifest(manifest: NamesBackend | str) -> Backend:
    """The Backend of a bundle read from disk (its manifest, or its artifacts' backend name).

    A bundle is not a build: it has no ``Build`` to carry its backend, so the modules that read one
    (runtime, deploy, verdict, the remote store's model card, serving) resolve its backend here.
    """
    return resolve_backend(manifest)


def backends_compiling_for(target: str) -> list[str]:
    """Every registered backend that compiles for ``target`` (imports each backend module)."""
    return [name for name in backend_names() if target in get_backend(name).targets]


def backend_recognizing(root: Path) -> str | None:
    """The backend that runs here and recognises ``root`` as its compiled artifacts (a directory
    without a manifest); None if none does."""
    for name in backend_names():
        backend = get_backend(name)
        if backend.runtime.can_run and backend.runtime.recognizes(root):
            return name
    return None


def reload_entry_points() -> None:
    """Forget the backends found so far: the next look-up reads the ``neuronc.backends`` entry points again.

    Names and backend instances are read once per process; a process that installs or removes a
    plugin distribution after that (a notebook, a test suite) calls this to see the change.
    """
    _entry_points.cache_clear()
    get_backend.cache_clear()


__all__ = [
    "ENTRY_POINT_GROUP",
    "Availability",
    "Backend",
    "BackendBase",
    "CompilePlan",
    "GraphSpec",
    "NamesBackend",
    "backend_for_manifest",
    "backend_names",
    "backend_recognizing",
    "backends_compiling_for",
    "get_backend",
    "is_registered",
    "reload_entry_points",
    "resolve_backend",
]
