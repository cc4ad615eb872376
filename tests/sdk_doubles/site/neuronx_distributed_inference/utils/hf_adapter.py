"""SDK double of ``neuronx_distributed_inference.utils.hf_adapter``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdk_double_common import recorded

SDK_DOUBLE = True
NXDI = "neuronx-distributed-inference"
HF_ADAPTER = "neuronx_distributed_inference.utils.hf_adapter"


@recorded(NXDI, f"{HF_ADAPTER}.load_pretrained_config")
def load_pretrained_config(model_path_or_name: str | None = None, hf_config: Any = None) -> Callable[[Any], None]:
    if (model_path_or_name is None) == (hf_config is None):
        raise ValueError("pass exactly one of model_path_or_name and hf_config")

    def load_config(self: Any) -> None:
        if hf_config is not None:
            data = hf_config.to_dict()
        else:
            data = json.loads((Path(str(model_path_or_name)) / "config.json").read_text(encoding="utf-8"))
            data["_name_or_path"] = str(model_path_or_name)
            # The real one copies AutoConfig(...).to_dict(), which has pad_token_id (None when unset).
            data.setdefault("pad_token_id", None)
        for key, value in data.items():
            setattr(self, key, value)

    return load_config


class HuggingFaceGenerationAdapter:
    @recorded(NXDI, f"{HF_ADAPTER}.HuggingFaceGenerationAdapter", method=True)
    def __init__(self, model: Any, input_start_offsets: Any = None) -> None:
        self.model = model
        self.input_start_offsets = input_start_offsets
