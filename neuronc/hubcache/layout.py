"""Every part of a path `cache synchronize` publishes, checked against optimum-neuron 0.4.5's own layout.

What optimum-neuron writes (huggingface/optimum-neuron v0.4.5 ``optimum/neuron/cache/hub_cache.py``,
shared/reference/hf-neuron-cache.md §2):

- ``neuronxcc-<neuronx-cc version>/`` — the compiler's version string, as its package metadata
  says it (``2.21.33363.0+82129205``: dotted numbers and a hex build suffix);
- ``MODULE_<graph hash>+<flags hash>/`` — libneuronxla's folder: decimal or hex digits, then the
  first 8 hex digits of an MD5 (``MODULE_<entry hash>`` without a suffix for traced models);
- ``0_REGISTRY/<optimum-neuron version>/`` — ``optimum.neuron.version.__version__`` (PEP 440:
  ``0.4.5``, ``0.0.25.dev0``);
- ``<arch digest>/<entry hash>.json`` — 64 and 20 hex digits (computed here, never read);
- ``<model_type>/<org>/<name>/<entry hash>.json`` — the transformers model type (lower case,
  digits, ``_`` and ``-``) and a Hub repository id (huggingface_hub's ``validate_repo_id`` rules:
  letters, digits, ``_ . -``, neither starting nor ending with ``.`` or ``-``, no ``--`` or ``..``,
  at most 96 characters).

A value outside these (``..``, ``/`` where one part is meant, a newline, an object where a string
is meant, a local directory where a Hub id is meant) is refused with the field it came from, before
anything is written or uploaded.
"""

from __future__ import annotations

import re

from neuronc.errors import printable

_COMPILER = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,12}){1,5}(?:\+[0-9a-f]{1,40})?\Z")
_OPTIMUM = re.compile(
    r"[0-9]{1,6}(?:\.[0-9]{1,12}){1,4}(?:(?:a|b|rc)[0-9]{1,6})?(?:\.post[0-9]{1,6})?(?:\.dev[0-9]{1,6})?\Z"
)
_MODULE = re.compile(r"MODULE_[0-9a-f]{1,64}(?:\+[0-9a-f]{8})?\Z")
_MODEL_TYPE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")
_HUB_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?\Z")
_TASK = re.compile(r"[a-z0-9][a-z0-9-]{0,63}\Z")
COMPILER_PREFIX = "neuronxcc-"


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(printable(value)) if len(value) <= 120 else repr(printable(value[:117]) + "...")
    return f"{type(value).__name__} {printable(str(value))[:80]}"


def compiler_problem(value: object, field: str) -> str | None:
    """Why ``value`` cannot be the neuronx-cc version of a ``neuronxcc-*`` folder (None: it can)."""
    if isinstance(value, str) and _COMPILER.match(value):
        return None
    return f"{field}: {_shown(value)} is not a neuronx-cc version (such as 2.21.33363.0+82129205)"


def optimum_problem(value: object, field: str) -> str | None:
    """Why ``value`` cannot be the optimum-neuron version of a ``0_REGISTRY/<version>`` folder."""
    if isinstance(value, str) and _OPTIMUM.match(value):
        return None
    return f"{field}: {_shown(value)} is not an optimum-neuron version (such as 0.4.5)"


def model_type_problem(value: object, field: str) -> str | None:
    if isinstance(value, str) and _MODEL_TYPE.match(value):
        return None
    return f"{field}: {_shown(value)} is not a transformers model type (such as llama)"


def task_problem(value: object, field: str) -> str | None:
    if isinstance(value, str) and _TASK.match(value):
        return None
    return f"{field}: {_shown(value)} is not an optimum-neuron task (such as text-generation)"


def hub_id_problem(value: object, field: str) -> str | None:
    """Why ``value`` cannot be the ``org/name`` a registry alias is filed under (None: it can)."""
    if isinstance(value, str) and value.count("/") == 1 and len(value) <= 96:
        org, name = value.split("/")
        if (
            _HUB_NAME.match(org)
            and _HUB_NAME.match(name)
            and ".." not in value
            and "--" not in value
            and not name.endswith(".git")
        ):
            return None
    return (
        f"{field}: {_shown(value)} is not a Hub model id (ORG/NAME: letters, digits, '_', '.', '-'); "
        "a local directory has none"
    )


def module_problem(module: object, compiler_folder: str) -> str | None:
    """Why ``module`` (from the manifest) cannot be a ``neuronxcc-<ver>/MODULE_*`` folder of this registry."""
    if not isinstance(module, str) or module.count("/") != 1:
        return f"compile_cache.modules: {_shown(module)} is not a neuronxcc-*/MODULE_* name"
    folder, name = module.split("/")
    if not folder.startswith(COMPILER_PREFIX) or compiler_problem(folder[len(COMPILER_PREFIX) :], "") is not None:
        return f"compile_cache.modules: {_shown(module)} is not a neuronxcc-*/MODULE_* name"
    if not _MODULE.match(name):
        return f"compile_cache.modules: {_shown(module)}: not a libneuronxla MODULE_<hash>+<flags> folder"
    if folder != compiler_folder:
        return (
            f"compile_cache.modules: {_shown(module)} was compiled by another neuronx-cc than the entry "
            f"names ({compiler_folder}): optimum-neuron would not find it"
        )
    return None
