"""SDK double of ``neuronx_distributed_inference.models.config``: NeuronConfig and InferenceConfig.

NeuronConfig accepts the documented keyword arguments only (a typo in neuronc's mapping fails
here, as it would be silently ignored or rejected by the real class) and applies the documented
defaults and assertions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import neuronx_distributed  # noqa: F401  (the real module imports NxD at module level)
import torch_neuronx  # noqa: F401

SDK_DOUBLE = True
CONFIG_FILE = "neuron_config.json"
_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_KNOWN = {
    "batch_size",
    "seq_len",
    "max_context_length",
    "max_new_tokens",
    "max_length",
    "padding_side",
    "torch_dtype",
    "cast_type",
    "tp_degree",
    "cp_degree",
    "pp_degree",
    "ep_degree",
    "attention_dp_degree",
    "world_size",
    "start_rank_id",
    "local_ranks_size",
    "enable_bucketing",
    "buckets",
    "context_encoding_buckets",
    "token_generation_buckets",
    "token_generation_batches",
    "on_device_sampling_config",
    "output_logits",
    "is_continuous_batching",
    "ctx_batch_size",
    "tkg_batch_size",
    "max_batch_size",
    "save_sharded_checkpoint",
    "skip_sharding",
    "skip_warmup",
    "on_cpu",
    "logical_nc_config",
    "logical_neuron_cores",
    "target",
    "quantized",
    "quantized_checkpoints_path",
    "quantization_type",
    "quantization_dtype",
    "kv_cache_quant",
    "fused_qkv",
    "sequence_parallel_enabled",
    "flash_decoding_enabled",
    "qkv_kernel_enabled",
    "attn_kernel_enabled",
    "mlp_kernel_enabled",
    "speculation_length",
    "enable_fused_speculation",
    "enable_eagle_speculation",
    "is_medusa",
    "is_block_kv_layout",
    "pa_num_blocks",
    "pa_block_size",
    "is_prefix_caching",
    "chunked_prefill_config",
    "async_mode",
    "cc_pipeline_tiling_factor",
    "scratchpad_page_size",
    "enable_spill_reload_dge",
}


class NeuronConfig:
    def __init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - _KNOWN)
        if unknown:
            raise TypeError(f"NeuronConfig got unexpected keyword arguments: {unknown}")
        self.batch_size = kwargs.pop("batch_size", 1)
        self.seq_len = kwargs.pop("seq_len", 128)
        self.max_context_length = kwargs.pop("max_context_length", self.seq_len)
        self.max_length = kwargs.pop("max_length", self.seq_len)
        assert self.max_context_length <= self.max_length, "max_context_length must be <= max_length"
        dtype = kwargs.pop("torch_dtype", "bfloat16")
        if dtype not in _DTYPES:
            raise ValueError(f"torch_dtype {dtype!r} is not one of {_DTYPES}")
        self.torch_dtype = dtype
        self.tp_degree = kwargs.pop("tp_degree", 1)
        self.enable_bucketing = kwargs.pop("enable_bucketing", False)
        self.context_encoding_buckets = kwargs.pop("context_encoding_buckets", None)
        self.token_generation_buckets = kwargs.pop("token_generation_buckets", None)
        for name, limit in (
            ("context_encoding_buckets", self.max_context_length),
            ("token_generation_buckets", self.max_length),
        ):
            buckets = getattr(self, name)
            if buckets is not None:
                assert buckets == sorted(buckets), f"{name} must be sorted"
                assert buckets[-1] <= limit, f"last of {name} must be <= {limit}"
        self.save_sharded_checkpoint = kwargs.pop("save_sharded_checkpoint", False)
        self.logical_nc_config = kwargs.pop("logical_nc_config", kwargs.pop("logical_neuron_cores", 1))
        self.target = kwargs.pop("target", None)
        if self.target not in (None, "inf2", "trn1", "trn1n", "trn2", "trn3"):
            raise ValueError(f"unknown target {self.target!r}")
        self.start_rank_id = kwargs.pop("start_rank_id", 0)
        self.local_ranks_size = kwargs.pop("local_ranks_size", self.tp_degree)
        for key, value in kwargs.items():
            setattr(self, key, value)

    def buckets(self) -> tuple[list[int], list[int]]:
        if not self.enable_bucketing:
            return [self.max_context_length], [self.max_length]
        return list(self.context_encoding_buckets or [self.max_context_length]), list(
            self.token_generation_buckets or [self.max_length]
        )


class InferenceConfig:
    def __init__(
        self,
        neuron_config: NeuronConfig,
        fused_spec_config: Any = None,
        load_config: Callable[[InferenceConfig], None] | None = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        self.neuron_config = neuron_config
        if load_config is not None:
            load_config(self)
        for key, value in kwargs.items():
            setattr(self, key, value)
        missing = [a for a in self.get_required_attributes() if not hasattr(self, a)]
        if missing:
            raise AttributeError(f"config is missing required attributes {missing}")

    def get_required_attributes(self) -> list[str]:
        return []

    @classmethod
    def get_neuron_config_cls(cls) -> type[NeuronConfig]:
        return NeuronConfig

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k != "neuron_config"}
        data["neuron_config"] = dict(vars(self.neuron_config))
        return data

    def save(self, model_path: str) -> None:
        path = Path(model_path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(self.to_json(), indent=2, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, model_path: str, **kwargs: Any) -> InferenceConfig:
        data = json.loads((Path(model_path) / CONFIG_FILE).read_text(encoding="utf-8"))
        neuron_config = cls.get_neuron_config_cls()(**data.pop("neuron_config"))
        return cls(neuron_config, **{**data, **kwargs})
