"""SDK double of ``vllm`` with the vllm-neuron plugin in CPU compile mode: ``LLM(**kwargs)`` fills the cache.

Not vLLM. What it does is bound to recorded upstream facts, so it accepts only what the real stack
would, and writes what the real plugin writes:

- the keyword arguments: ``LLM.__init__``'s parameters and ``EngineArgs``'s fields of the vLLM
  version its distribution metadata claims (tests/fixtures/vllm_neuron/engine_args.json, read from
  the PyPI wheels by scripts/record_vllm_engine_args.py); anything else is a TypeError, as in vLLM;
- the environment and the bucket rules of ``additional_config.neuron_config``, the compile cache
  layout under ``$VLLM_CACHE_ROOT`` and the key's components (tests/fixtures/vllm_neuron/facts.json):
  one ``<32-hex md5>/`` entry per bucket with ``graph.hlo``, ``graph_<key>.neff``,
  ``.artifact_metadata_v0.json`` and, last, ``.compilation_complete``; lock metadata beside it and a
  hit marker inside, as the plugin leaves them; an entry whose files are all there is reused (a hit),
  as the plugin does.

The KV cache: a block count sized from ``gpu_memory_utilization``, the budget cap and the model (the
plugin's CPU-compile sizing, facts.engine), or ``num_gpu_blocks_override``; it is one of every key's
components (the KV shape is an input of every graph) and is reported as vLLM's client reports it,
``LLM(...).llm_engine.vllm_config.cache_config.num_gpu_blocks`` (facts.engine.kv_blocks). The route
(``VLLM_NEURON_BACKEND``, the line's default when unset) picks how the graph is captured, so it is a
component of the graph text in the key (an inference: the XLA and native routes lower through
different front ends, vllm-neuron how-to-choose-compilation-route).

``NEURONC_SDK_DOUBLE_FAIL=vllm`` makes the compile die after the first entry's NEFF (no completion
marker), as a compiler crash would leave it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SDK_DOUBLE = True
_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "vllm_neuron"


def _facts() -> dict[str, Any]:
    return json.loads((_FIXTURES / "facts.json").read_text(encoding="utf-8"))


def _accepted(version: str) -> set[str]:
    recorded = json.loads((_FIXTURES / "engine_args.json").read_text(encoding="utf-8"))["versions"]
    if version not in recorded:
        raise RuntimeError(f"vllm double: no recorded EngineArgs for vLLM {version} (have {', '.join(recorded)})")
    entry = recorded[version]
    return set(entry["engine_args_fields"]) | set(entry["llm_parameters"])


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


__version__ = _version("vllm") or "0.0.0"


def _host(path: str) -> Path:
    """A container path as this process opens it (tests/sdk_doubles/container_runtime.py maps mounts)."""
    for container, host in json.loads(os.environ.get("NEURONC_FAKE_MOUNTS") or "[]"):
        if path == container or path.startswith(container + "/"):
            return Path(host + path[len(container) :])
    return Path(path)


def _ascending(values: list[int]) -> bool:
    return values == sorted(set(values))


class LLM:
    """vLLM's offline engine; with VLLM_NEURON_CPU_COMPILE=1 the Neuron worker compiles every bucket."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        facts = _facts()
        env_facts, cache = facts["env"], facts["cache"]
        unknown = sorted(set(kwargs) - _accepted(__version__))
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {unknown[0]!r}")
        if os.environ.get(env_facts["cpu_compile"]) != "1":
            raise RuntimeError("vllm double: no Neuron device here; only CPU compile mode is modelled")
        target = os.environ.get(env_facts["target"])
        if target not in env_facts["targets"]:
            raise RuntimeError(f"{env_facts['target']} is required in CPU compile mode (got {target!r})")
        lnc = int(os.environ.get(env_facts["lnc"], "2"))
        if lnc not in env_facts["lnc_values"]:
            raise ValueError(f"{env_facts['lnc']}={lnc}: only 1 or 2")
        checkpoint = _host(model)
        if not (checkpoint / "config.json").is_file() or not list(checkpoint.glob("*.safetensors")):
            raise OSError(f"{model}: not a Hugging Face safetensors checkpoint")
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        max_model_len = int(kwargs.get("max_model_len") or config.get("max_position_embeddings", 2048))
        max_num_seqs = int(kwargs.get("max_num_seqs") or 256)
        max_tokens = int(kwargs.get("max_num_batched_tokens") or 8192)
        tp = int(kwargs.get("tensor_parallel_size") or 1)
        heads = int(config.get("num_attention_heads", 1))
        if heads % tp:
            raise ValueError(
                f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
            )
        neuron = dict((kwargs.get("additional_config") or {}).get("neuron_config") or {})
        tokens = list(neuron.get("num_batched_tokens_buckets") or [max_tokens])
        seqs = list(neuron.get("num_seqs_buckets") or [max_num_seqs])
        decode = list(neuron.get("decode_context_length_buckets") or [])
        if not _ascending(tokens) or tokens[-1] != max_tokens:
            raise ValueError("num_batched_tokens_buckets must ascend and end at max_num_batched_tokens")
        if not _ascending(seqs) or seqs[-1] != max_num_seqs:
            raise ValueError("num_seqs_buckets must ascend and end at max_num_seqs")
        if decode and (not _ascending(decode) or decode[-1] >= max_model_len or any(d % 128 for d in decode)):
            raise ValueError("decode_context_length_buckets: ascending, below max_model_len, multiples of 128")
        root = _host(os.environ.get(cache["root_env"]) or str(Path.home() / ".cache" / "vllm")) / cache["root"]
        gmu = float(kwargs.get("gpu_memory_utilization", 0.92))
        cap = float(os.environ.get("VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION", "0.30"))
        layers = int(config.get("num_hidden_layers") or 1)
        override = kwargs.get(facts["engine"]["kv_blocks"]["override"])
        # A static per-target figure stands in for the device's memory, as CPU compile sizes it.
        hbm_blocks = 96 * 1024 if target == "trn2" else 144 * 1024
        blocks = int(override) if override is not None else max(1, int(hbm_blocks * gmu * cap) // layers // tp)
        route = os.environ.get(env_facts["route"]) or "default"
        versions = [
            f"torch_neuronx:{_version('libtorch-neuronx-lite') or _version('torch-neuronx')}",
            f"neuronxcc:{_version('neuronx-cc')}",
            f"nki:{_version('nki')}",
            f"compiler_args:--lnc={lnc} --target={target}",
        ]
        # The KV cache is an input of every graph; its size comes from the GMU and the model (facts.engine).
        kv = f"kv_blocks:{blocks}"
        graphs = [f"prefill tokens={t}" for t in tokens]
        graphs += [f"decode seqs={s} context={c}" for s in seqs for c in [*decode, max_model_len]]
        failing = os.environ.get("NEURONC_SDK_DOUBLE_FAIL") == "vllm"
        dtype = str(kwargs.get("dtype", "auto"))
        for graph in graphs:
            components = [
                f"{graph} layers={config.get('num_hidden_layers')} hidden={config.get('hidden_size')} route={route}",
                f"tp={tp}",
                dtype,
                kv,
                *versions,
            ]
            key = hashlib.md5("|".join(components).encode()).hexdigest()[:32]
            self._compile_one(root, key, cache, graph, failing)
        cache_config = SimpleNamespace(num_gpu_blocks=blocks)
        self.llm_engine = SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache_config))

    @staticmethod
    def _compile_one(root: Path, key: str, cache: dict[str, Any], graph: str, failing: bool) -> None:
        entry = root / key
        complete = entry / cache["complete"]
        neff = entry / cache["neff"].format(key=key)
        if complete.is_file() and neff.is_file():
            (entry / cache["accessed"]).write_text(str(int(time.time())))
            return
        root.mkdir(parents=True, exist_ok=True)
        lock = root / cache["lock_metadata"].format(key=key)
        lock.write_text(
            f"pid:{os.getpid()}\nprocess_name:python\ncmdline:vllm double\nrank:0\ntimestamp:{time.time()}\n"
        )
        Path(str(lock) + cache["lock_suffix"]).write_text("")
        entry.mkdir(parents=True, exist_ok=True)
        (entry / cache["hlo"]).write_text(f"HloModule {graph}\n")
        neff.write_bytes(b"NEFF" + hashlib.sha256(graph.encode()).digest())
        if failing:
            raise RuntimeError(f"neuronx-cc terminated while compiling {graph} (NEURONC_SDK_DOUBLE_FAIL=vllm)")
        metadata = entry / cache["metadata"].format(version=0)
        metadata.write_text(json.dumps({"version": 0, cache["metadata_key_field"]: key}))
        complete.write_text(f"completed:{time.time()}\nneff_size:{neff.stat().st_size}\n")
        (entry / cache["accessed"]).write_text(str(int(time.time())))
