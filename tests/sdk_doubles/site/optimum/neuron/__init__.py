"""SDK double of ``optimum.neuron`` (optimum-neuron 0.4.5's decoder API).

``NxDNeuronConfig`` has 0.4.5's constructor; ``NeuronModelForCausalLM`` has its ``get_neuron_config``
/ ``export`` / ``save_pretrained`` / ``save`` / ``from_pretrained``, writes the exported layout
(neuron_config.json with the bookkeeping keys, config.json, model.pt, checkpoint/weights/ when
exported from a local directory) and applies 0.4.5's checks (compilation target against
NEURON_PLATFORM_TARGET_OVERRIDE; versions, target and weights at load).

Each compiled graph also lands in the local compile cache, as libneuronxla leaves it under
optimum-neuron's ``hub_neuronx_cache`` (shared/reference/hf-neuron-cache.md §1.3, §2.1):
``$NEURON_COMPILE_CACHE_URL/neuronxcc-<version>/MODULE_<graph hash>+<flags hash>/`` with
``model.hlo_module.pb``, ``compile_flags.json``, ``model.neff`` and the empty ``model.done``; the
flags hash is the first 8 hex digits of the MD5 of ``json.dumps(flags)``. A failing compile leaves
``model.log`` and no NEFF (a "poisoned" entry).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

from sdk_double_common import compile_graph, load_safetensors_dir, save_torchscript, shard_to

SDK_DOUBLE = True
__version__ = "0.4.5"
_INSTANCE = {"trn1": "trn1", "trn1n": "trn1", "inf2": "trn1", "trn2": "trn2"}
_DTYPES = {"bfloat16", "float16", "float32"}


def _dtype_name(dtype: Any) -> str:
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}")
    return name


class NxDNeuronConfig:
    def __init__(
        self,
        checkpoint_id: str | None = None,
        checkpoint_revision: str | None = None,
        batch_size: int | None = 1,
        max_batch_size: int | None = None,
        continuous_batching: bool | None = False,
        speculation_length: int | None = 0,
        sequence_length: int | None = 128,
        tp_degree: int | None = 1,
        ep_degree: int | None = 1,
        pp_degree: int | None = 1,
        torch_dtype: Any = "bfloat16",
        n_active_tokens: int | None = None,
        max_context_length: int | None = None,
        output_logits: bool | None = False,
        fused_qkv: bool | None = False,
        target: str | None = None,
        on_device_sampling: bool | None = False,
        max_topk: int | None = 256,
        start_rank_id: int | None = 0,
        local_ranks_size: int | None = None,
        capacity_factor: float | None = None,
        glu_mlp: bool = True,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.checkpoint_revision = checkpoint_revision
        self.batch_size = batch_size
        self.sequence_length = sequence_length
        self.tp_degree = tp_degree
        self.torch_dtype = _dtype_name(torch_dtype)
        self.n_active_tokens = sequence_length if n_active_tokens is None else n_active_tokens
        self.output_logits = output_logits
        self.max_context_length = sequence_length if max_context_length is None else max_context_length
        self.fused_qkv = fused_qkv
        self.continuous_batching = continuous_batching
        self.max_batch_size = batch_size if max_batch_size is None else max_batch_size
        self.on_device_sampling = on_device_sampling
        self.max_topk = max_topk
        self.speculation_length = speculation_length
        self.pp_degree = pp_degree
        self.ep_degree = ep_degree
        self.start_rank_id = start_rank_id
        self.local_ranks_size = local_ranks_size or (tp_degree or 1) * (pp_degree or 1) * (ep_degree or 1)
        self.target = target
        self.capacity_factor = capacity_factor
        self.glu_mlp = glu_mlp

    def to_dict(self) -> dict[str, Any]:
        import neuronxcc

        data = dict(vars(self))
        data["torch_dtype"] = _dtype_name(data["torch_dtype"])
        data["_serialized_key"] = "NxDNeuronConfig"
        data["optimum_neuron_version"] = __version__
        data["neuronxcc_version"] = neuronxcc.__version__
        return data

    def save_pretrained(self, save_directory: str) -> None:
        Path(save_directory).mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        (Path(save_directory) / "neuron_config.json").write_text(text, encoding="utf-8")

    @classmethod
    def from_pretrained(cls, path: str) -> NxDNeuronConfig:
        import neuronxcc

        data = json.loads((Path(path) / "neuron_config.json").read_text(encoding="utf-8"))
        if data.pop("optimum_neuron_version") != __version__:
            raise ValueError("exported with another optimum-neuron version")
        if data.pop("neuronxcc_version") != neuronxcc.__version__:
            raise RuntimeError("exported with another neuronx-cc version")
        data.pop("_serialized_key")
        return cls(**data)


class NeuronModelForCausalLM:
    def __init__(self, config: Any, neuron_config: NxDNeuronConfig) -> None:
        self.config = config
        self.neuron_config = neuron_config
        self.loaded_weights_from: str | None = None

    @classmethod
    def get_neuron_config(
        cls,
        model_name_or_path: str | Path,
        config: Any = None,
        token: bool | str | None = None,
        revision: str | None = None,
        instance_type: str | None = None,
        batch_size: int | None = None,
        sequence_length: int | None = None,
        tensor_parallel_size: int | None = None,
    ) -> NxDNeuronConfig:
        if not os.path.isdir(model_name_or_path):
            raise RuntimeError("SDK double: Hub ids need the network")
        if config is None:
            raise RuntimeError("SDK double: pass the config")
        if instance_type not in _INSTANCE:
            raise ValueError(f"{instance_type} is not a valid instance type")
        batch_size = batch_size or 1
        return NxDNeuronConfig(
            batch_size=batch_size,
            sequence_length=sequence_length or min(getattr(config, "max_position_embeddings", 1024), 4096),
            tp_degree=tensor_parallel_size or 1,
            torch_dtype=config.dtype,
            target=_INSTANCE[instance_type],
            on_device_sampling=True,
            fused_qkv=True,
            continuous_batching=batch_size > 1,
        )

    @classmethod
    def export(
        cls,
        model_id: str,
        neuron_config: NxDNeuronConfig,
        config: Any = None,
        token: Any = None,
        revision: str | None = None,
        load_weights: bool | None = False,
        **kwargs: Any,
    ) -> NeuronModelForCausalLM:
        env_target = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
        if env_target is not None and env_target != neuron_config.target:
            raise ValueError(
                f"The compilation target is {neuron_config.target} but NEURON_PLATFORM_TARGET_OVERRIDE is {env_target}"
            )
        flags = shlex.split(os.environ.get("NEURON_CC_FLAGS", ""))
        nc = neuron_config
        ctx_batch = 1 if nc.continuous_batching else nc.batch_size
        for tag, name in (
            ("context_encoding", f"cte b{ctx_batch} s{nc.max_context_length} tp{nc.tp_degree} {nc.torch_dtype}"),
            ("token_generation", f"tkg b{nc.batch_size} s{nc.sequence_length} tp{nc.tp_degree} {nc.torch_dtype}"),
        ):
            _cached_compile(Path.cwd() / "optimum" / tag, name, nc.target or "trn1", flags)
        config.torch_dtype = nc.torch_dtype
        return cls(config, neuron_config)

    def save(self, dest_path: str, weight_path: str | None = None) -> None:
        dest = Path(dest_path)
        self.config.save_pretrained(str(dest))
        self.neuron_config.save_pretrained(str(dest))
        save_torchscript(dest / "model.pt", {"neuron_config": self.neuron_config.to_dict()})
        if weight_path is not None:
            tensors = load_safetensors_dir(Path(weight_path))
            shard_to(
                tensors,
                self.neuron_config.tp_degree,
                dest / "checkpoint" / "weights",
                "tp{rank}_sharded_checkpoint.safetensors",
            )

    def save_pretrained(self, save_directory: str) -> None:
        name = getattr(self.config, "_name_or_path", "")
        self.save(save_directory, weight_path=name if os.path.isdir(name) else None)

    @classmethod
    def from_pretrained(cls, model_id: str, **kwargs: Any) -> NeuronModelForCausalLM:
        import torch
        from transformers import AutoConfig

        neuron_config = NxDNeuronConfig.from_pretrained(model_id)
        config = AutoConfig.from_pretrained(model_id)
        torch.jit.load(str(Path(model_id) / "model.pt"))
        model = cls(config, neuron_config)
        checkpoint = Path(model_id) / "checkpoint"
        if checkpoint.exists():
            model.loaded_weights_from = str(checkpoint)
        elif list(Path(model_id).glob("*.safetensors")):
            load_safetensors_dir(Path(model_id))
            model.loaded_weights_from = model_id
        elif neuron_config.checkpoint_id is not None:
            model.loaded_weights_from = f"hub:{neuron_config.checkpoint_id}@{neuron_config.checkpoint_revision}"
        else:
            raise ValueError(f"Checkpoint file not found under {model_id}.")
        return model


def _cached_compile(workdir: Path, name: str, target: str, env_flags: list[str]) -> bytes:
    """One graph through the local compile cache: reuse a complete entry, else compile and store it."""
    import neuronxcc

    flags = ["--target", target, "--model-type=transformer", "--auto-cast=none", *env_flags]
    url = os.environ.get("NEURON_COMPILE_CACHE_URL", "/var/tmp/neuron-compile-cache")
    hlo = f"HloModule {name}".encode()
    graph_hash = hashlib.sha256(hlo).hexdigest()[:20]
    flags_hash = hashlib.md5(json.dumps(flags).encode()).hexdigest()[:8]
    entry = Path(url) / f"neuronxcc-{neuronxcc.__version__}" / f"MODULE_{graph_hash}+{flags_hash}"
    if url.startswith("s3://"):
        return compile_graph(workdir, name, flags)
    if (entry / "model.done").exists() and (entry / "model.neff").exists():
        return (entry / "model.neff").read_bytes()
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "model.hlo_module.pb").write_bytes(hlo)
    (entry / "compile_flags.json").write_text(json.dumps(flags), encoding="utf-8")
    try:
        neff = compile_graph(workdir, name, flags)
    except RuntimeError:
        (entry / "model.log").write_text((workdir / "log-neuron-cc.txt").read_text(), encoding="utf-8")
        raise
    (entry / "model.neff").write_bytes(neff)
    (entry / "model.done").write_bytes(b"")
    return neff
