"""Compile a vllm-neuron build: start the real vLLM engine with the Neuron platform in CPU compile mode.

``python compile_script.py JOB.json RESULT.json`` - run by neuronc's vllm-neuron backend on a host
with the Neuron SDK, or inside the release's Deep Learning Container (where neuronc is not
installed: this file imports only the standard library and vLLM). The environment is set by the
caller: ``VLLM_NEURON_CPU_COMPILE=1``, ``NEURON_PLATFORM_TARGET_OVERRIDE``, ``NEURON_LOGICAL_NC_CONFIG``
and a staging ``VLLM_CACHE_ROOT``.

Constructing ``vllm.LLM(**engine_kwargs)`` initialises the engine, and the plugin compiles every
bucket while it warms up, writing each NEFF into ``$VLLM_CACHE_ROOT/neuron/compile_cache/<key>/``
(vllm-neuron docs/design/compilation/cpu_compilation.md: "Pre-compiling NEFFs on CPU for later
device execution"). Nothing is generated: CPU compile mode cannot run the model. The result file
holds the versions installed where this ran (read from package metadata), the seconds it took and
the KV block count the engine sized (``llm_engine.vllm_config.cache_config.num_gpu_blocks``, which
vLLM's client fills from its engine cores, vLLM 0.21 ``vllm/v1/engine/utils.py``); on failure, the error.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import platform
import sys
import time
import traceback

PACKAGES = ("vllm", "vllm-neuron", "neuronx-cc", "nki", "libtorch-neuronx-lite", "torch", "transformers")


def installed_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _num_gpu_blocks(engine: object) -> int | None:
    """The KV block count the engine sized, or None where this vLLM does not say."""
    node: object = engine
    for name in ("llm_engine", "vllm_config", "cache_config", "num_gpu_blocks"):
        node = getattr(node, name, None)
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def main(argv: list[str]) -> int:
    job_file, result_file = argv[0], argv[1]
    with open(job_file, encoding="utf-8") as f:
        job = json.load(f)
    versions = installed_versions()
    started = time.monotonic()
    try:
        vllm = importlib.import_module("vllm")
        engine = vllm.LLM(**job["engine_kwargs"])
        blocks = _num_gpu_blocks(engine)
        del engine
    except Exception as exc:  # the process boundary: the caller reports what the engine raised
        traceback.print_exc()
        outcome = {"error": {"type": type(exc).__name__, "message": str(exc)}, "versions": versions}
        with open(result_file, "w", encoding="utf-8") as f:
            json.dump(outcome, f)
        return 1
    outcome = {
        "seconds": round(time.monotonic() - started, 3),
        "versions": versions,
        "num_gpu_blocks": blocks,
        # NKI kernels are cached per Python version: the verdict warns when the server runs another.
        "python": platform.python_version(),
    }
    with open(result_file, "w", encoding="utf-8") as f:
        json.dump(outcome, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
