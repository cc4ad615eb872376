"""Load a bundle to run it, whatever backend built it: ``load(bundle_dir).generate(...)``.

Only backends with a runtime on this machine can load (``Backend.runtime.can_run``; today ``inductor``, on
CPU). Importing this module is cheap; torch is imported by the backend's loader.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.errors import BackendUnavailableError, BundleFormatError

if TYPE_CHECKING:
    from neuronc.backends.base import Backend


def bundle_backend(bundle_dir: str | os.PathLike[str]) -> str:
    """The backend that built a bundle: from its manifest, else the backend that recognises its artifacts."""
    root = Path(bundle_dir)
    if not root.is_dir():
        raise BundleFormatError(f"{root}: no such bundle directory")
    if (root / "manifest.json").is_file():
        from neuronc.bundle import read_manifest

        return str(read_manifest(root).backend)
    # A backend's compiled artifacts without a manifest (a CompileJob's directory): the backends
    # that run here say whether they are theirs.
    from neuronc.backends import backend_recognizing

    name = backend_recognizing(root)
    if name is not None:
        return name
    raise BundleFormatError(
        f"{root}: not a bundle (no manifest.json)", hint="pass the directory `neuronc compile` printed"
    )


def load(bundle_dir: str | os.PathLike[str]) -> Any:
    """Load a bundle for generation; an object with ``generate(prompt, max_new_tokens, ...)``."""
    return runnable_backend(bundle_dir).runtime.load(bundle_dir)


def runnable_backend(bundle_dir: str | os.PathLike[str]) -> Backend:
    """The backend that built a bundle, if it can run the bundle here (BackendUnavailableError, exit 5, if not)."""
    from neuronc.backends import backend_for_manifest

    # A bundle read from disk names its backend: resolved here, once, for `run`, `serve` and `verify`.
    name = bundle_backend(bundle_dir)
    backend = backend_for_manifest(name)
    if not backend.runtime.can_run:
        msg = f"bundles of backend '{name}' cannot run here: neuronc has no runtime for them"
        raise BackendUnavailableError(
            msg, hint="run it on its target with the backend's own runtime (see `neuronc inspect`)"
        )
    availability = backend.toolchain.availability()
    if not availability.available:
        raise BackendUnavailableError(
            f"backend '{name}' is not available: {availability.reason}", hint=availability.install_hint
        )
    return backend
