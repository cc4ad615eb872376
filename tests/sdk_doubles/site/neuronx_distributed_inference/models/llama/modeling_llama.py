"""SDK double of ``neuronx_distributed_inference.models.llama.modeling_llama``.

``compile()`` writes neuron_config.json, one neuronx-cc log + NEFF per bucket under
``$BASE_COMPILE_WORK_DIR/<submodel>/_tp0_bk<n>/`` and model.pt, plus
``weights/tp{rank}_sharded_checkpoint.safetensors`` when ``save_sharded_checkpoint`` is set.
``load()`` checks what the real one needs on disk (model.pt; the rank shards, or a checkpoint at
``_name_or_path`` if that exists, else at the constructor's model_path) instead of using a device.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from sdk_double_common import compile_graph, load_safetensors_dir, recorded, save_torchscript, shard_to

from neuronx_distributed_inference.models.config import InferenceConfig, NeuronConfig

SDK_DOUBLE = True
NXDI = "neuronx-distributed-inference"
MODEL = "neuronx_distributed_inference.models.llama.modeling_llama.NeuronLlamaForCausalLM"
compiled_paths: list[str] = []


class LlamaInferenceConfig(InferenceConfig):
    def get_required_attributes(self) -> list[str]:
        return [
            "hidden_size",
            "num_attention_heads",
            "num_hidden_layers",
            "num_key_value_heads",
            "pad_token_id",
            "vocab_size",
            "max_position_embeddings",
            "rope_theta",
            "rms_norm_eps",
            "hidden_act",
        ]


class NeuronLlamaForCausalLM:
    @recorded(NXDI, MODEL, method=True)
    def __init__(
        self, model_path: str, config: InferenceConfig | None = None, neuron_config: NeuronConfig | None = None
    ):
        if config is None:
            config = self.get_config_cls().load(model_path)
        self.model_path = model_path
        self.config = config
        self.neuron_config = config.neuron_config
        self.loaded_weights_from: str | None = None

    @classmethod
    @recorded(NXDI, f"{MODEL}.get_config_cls", method=True)
    def get_config_cls(cls) -> type[InferenceConfig]:
        return LlamaInferenceConfig

    @classmethod
    @recorded(NXDI, f"{MODEL}.get_neuron_config_cls", method=True)
    def get_neuron_config_cls(cls) -> type[NeuronConfig]:
        return NeuronConfig

    @recorded(NXDI, f"{MODEL}.compile", method=True)
    def compile(
        self, compiled_model_path: str, debug: bool = False, pre_shard_weights_hook: Any = None, dry_run: bool = False
    ) -> None:
        # The real code joins file names by string concatenation.
        assert compiled_model_path.endswith("/"), "compiled_model_path must end with '/'"
        nc = self.neuron_config
        self.config.save(compiled_model_path)
        workdir = Path(os.environ.get("BASE_COMPILE_WORK_DIR", "/tmp/nxd_model/"))
        flags = shlex.split(os.environ.get("NEURON_CC_FLAGS", ""))
        flags += ["--auto-cast=none", "--model-type=transformer", f"--lnc={nc.logical_nc_config}"]
        if nc.target:
            flags += ["--target", nc.target]
        cte, tkg = nc.buckets()
        for tag, buckets in (("context_encoding_model", cte), ("token_generation_model", tkg)):
            for i, bucket in enumerate(buckets):
                compile_graph(workdir / tag / f"_tp0_bk{i}", f"{tag} bucket {bucket}", flags)
        if dry_run:
            return
        save_torchscript(Path(compiled_model_path) / "model.pt", {"cte": cte, "tkg": tkg, "tp": nc.tp_degree})
        if nc.save_sharded_checkpoint:
            tensors = load_safetensors_dir(Path(self.model_path))
            shard_to(
                tensors, nc.tp_degree, Path(compiled_model_path) / "weights", "tp{rank}_sharded_checkpoint.safetensors"
            )
        compiled_paths.append(compiled_model_path)

    @recorded(NXDI, f"{MODEL}.load", method=True)
    def load(
        self,
        compiled_model_path: str,
        start_rank_id: int | None = None,
        local_ranks_size: int | None = None,
        skip_warmup: bool = False,
    ) -> None:
        import torch

        torch.jit.load(compiled_model_path + "model.pt")
        nc = self.neuron_config
        if nc.save_sharded_checkpoint:
            for rank in range(nc.tp_degree):
                shard = Path(compiled_model_path) / "weights" / f"tp{rank}_sharded_checkpoint.safetensors"
                if not shard.is_file():
                    raise FileNotFoundError(shard)
            self.loaded_weights_from = str(Path(compiled_model_path) / "weights")
            return
        name = getattr(self.config, "_name_or_path", None)
        source = name if name and os.path.exists(name) else self.model_path
        load_safetensors_dir(Path(source))
        self.loaded_weights_from = str(source)
