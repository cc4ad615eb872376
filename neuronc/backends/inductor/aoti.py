"""Load one compiled graph (an AOTInductor ``.pt2`` package) without importing ``torch._inductor``.

torch's public loader, ``torch._inductor.aoti_load_package``, lives in ``torch._inductor``, whose
import pulls in ``torch._dynamo``, sympy and the compile stack: about as long again as ``import torch``
itself, to run graphs that are already compiled. What it does with a package file (torch 2.13,
``torch/_inductor/package/package.py`` ``load_package`` and
``torch/export/pt2_archive/_package.py`` ``load_pt2`` / ``_load_aoti`` / ``AOTICompiledModel``):

- check the archive's format version (``load_pt2``; the runtime refuses a bundle compiled by
  another torch before any package loads: ``runtime.check_toolchain``);
- construct the C++ loader ``torch._C._aoti.AOTIModelPackageLoader(path, model_name,
  run_single_threaded, num_runners, device_index)`` with ``("model", False, 1, -1)``;
- compare the package's device metadata with ``torch._inductor.codecache.get_device_information``
  and only log a warning on a mismatch (the runtime checks the CPU ISA itself, from the bundle's
  index: ``runtime.check_toolchain``);
- call: flatten ``(args, kwargs)`` (kwargs in the order of the package's input tree spec), keep
  the tensors, ``loader.boxed_run(tensors)``, unflatten the outputs with its output tree spec
  (``get_call_spec()[1]``, torch.utils._pytree's JSON: ``[1, {"type": null, ...}]`` for a single
  tensor, which is what every neuronc graph returns: its logits);
- ``load_constants(map, check_full_update=, user_managed=)`` is
  ``loader.load_constants(map, False, check_full_update, user_managed, False)`` (``use_inactive`` and
  ``allow_h2d_copy`` off).

There is no public API for the C++ loader, so ``_Direct`` below constructs, calls and binds it
itself (the two checks are the runtime's, as said) for the positional-tensor, one-tensor-output
graphs neuronc compiles. Where torch lacks the class, a call's signature differs (pybind11 raises
TypeError for arguments it cannot match) or the package's output is not one tensor, the graph is
loaded with the public loader instead. tests/test_runtime_loader.py
(marked ``compat``) checks that both give the same logits on the demo bundle.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

# torch.utils._pytree's serialized tree spec of a single tensor (protocol 1, a leaf).
_ONE_TENSOR_SPEC = [1, {"type": None, "context": None, "children_spec": []}]
# torch's own defaults for a package written by aoti_compile_and_package (package.py load_package).
_MODEL_NAME = "model"
_RUN_SINGLE_THREADED = False
_NUM_RUNNERS = 1
_DEVICE_INDEX = -1


class _Direct:
    """One package through ``torch._C._aoti.AOTIModelPackageLoader``, called as AOTICompiledModel calls it."""

    def __init__(self, loader: Any, path: Path) -> None:
        self._loader = loader
        self._path = path
        self._fallback: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._fallback is not None:
            return self._fallback(*args)
        # neuronc's graphs take positional tensors only (InductorRunner.call checks each), so the
        # flattened arguments are ``args`` themselves; the output is one tensor (load_package checks).
        [output] = self._loader.boxed_run([x for x in args if isinstance(x, torch.Tensor)])
        return output

    def get_constant_fqns(self) -> list[str]:
        return list(self._loader.get_constant_fqns())

    def load_constants(self, constants: Mapping[str, Any], *, check_full_update: bool, user_managed: bool) -> None:
        try:
            self._loader.load_constants(dict(constants), False, check_full_update, user_managed, False)
        except TypeError as exc:
            # Another torch's signature: from here on this graph is the public loader's.
            log.debug("AOTIModelPackageLoader.load_constants: %s; using torch's public loader", exc)
            self._fallback = public_load_package(self._path)
            self._fallback.load_constants(constants, check_full_update=check_full_update, user_managed=user_managed)


def public_load_package(path: Path) -> Any:
    """The graph through ``torch._inductor.aoti_load_package`` (imports torch._dynamo: about a second)."""
    import torch._inductor

    return torch._inductor.aoti_load_package(str(path))


def load_package(path: Path) -> Any:
    """A compiled graph, callable with its positional tensors; ``get_constant_fqns`` and ``load_constants``."""
    loader_class = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader_class is None:
        return public_load_package(path)
    try:
        loader = loader_class(str(path), _MODEL_NAME, _RUN_SINGLE_THREADED, _NUM_RUNNERS, _DEVICE_INDEX)
        output_spec = json.loads(loader.get_call_spec()[1])
    except (TypeError, AttributeError, ValueError, IndexError) as exc:
        log.debug("torch._C._aoti.AOTIModelPackageLoader: %s; using torch's public loader", exc)
        return public_load_package(path)
    if output_spec != _ONE_TENSOR_SPEC:
        log.debug("%s returns %s, not one tensor; using torch's public loader", path.name, output_spec)
        return public_load_package(path)
    return _Direct(loader, path)
