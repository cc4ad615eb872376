"""SDK double of ``neuronx_distributed_inference.models.config``: NeuronConfig and InferenceConfig.

NeuronConfig accepts the keyword arguments the real class reads, as recorded from the upstream
source (``sdk_double_common.recorded``): a typo in neuronc's mapping fails here, where the real
class would only log it and compile without the setting. It applies the real defaults and
assertions neuronc relies on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import neuronx_distributed  # noqa: F401  (the real module imports NxD at module level)
import torch_neuronx  # noqa: F401
from sdk_double_common import recorded

SDK_DOUBLE = True
NXDI = "neuronx-distributed-inference"
CONFIG = "neuronx_distributed_inference.models.config"
CONFIG_FILE = "neuron_config.json"
_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


class NeuronConfig:
    @recorded(NXDI, f"{CONFIG}.NeuronConfig", method=True)
    def __init__(self, **kwargs: Any) -> None:
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
    @recorded(NXDI, f"{CONFIG}.InferenceConfig", method=True)
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
    @recorded(NXDI, f"{CONFIG}.InferenceConfig.load", method=True)
    def load(cls, model_path: str, **kwargs: Any) -> InferenceConfig:
        data = json.loads((Path(model_path) / CONFIG_FILE).read_text(encoding="utf-8"))
        neuron_config = cls.get_neuron_config_cls()(**data.pop("neuron_config"))
        return cls(neuron_config, **{**data, **kwargs})
