"""optimum-neuron 0.4.5's ``NxDNeuronConfig`` constructor, recorded, and the options model built from it.

``NxDNeuronConfig.from_pretrained`` calls the constructor with every key saved in
neuron_config.json, so a key the constructor does not take, written there by an override, makes
the bundle compile but never load. ``options.neuron_config`` of the optimum-neuron backend is
therefore checked against the constructor's parameters, recorded here from
huggingface/optimum-neuron v0.4.5 optimum/neuron/models/inference/backend/config.py (name and
default as written in the source). tests/contract/test_optimum_neuron_contract.py checks this record
against the real class's signature in an environment with optimum-neuron 0.4.5 installed.
"""

from __future__ import annotations

from pydantic import Field

from neuronc.spec import StrictModel

OPTIMUM_NEURON_VERSION = "0.4.5"

# (parameter, default) of NxDNeuronConfig.__init__, in order.
NXD_NEURON_CONFIG_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("checkpoint_id", "None"),
    ("checkpoint_revision", "None"),
    ("batch_size", "1"),
    ("max_batch_size", "None"),
    ("continuous_batching", "False"),
    ("speculation_length", "0"),
    ("sequence_length", "128"),
    ("tp_degree", "1"),
    ("ep_degree", "1"),
    ("pp_degree", "1"),
    ("torch_dtype", "torch.bfloat16"),
    ("n_active_tokens", "None"),
    ("max_context_length", "None"),
    ("output_logits", "False"),
    ("fused_qkv", "False"),
    ("target", "None"),
    ("on_device_sampling", "False"),
    ("max_topk", "256"),
    ("start_rank_id", "0"),
    ("local_ranks_size", "None"),
    ("capacity_factor", "None"),
    ("glu_mlp", "True"),
)


class OptimumNeuronConfig(StrictModel):
    """``options.neuron_config``: NxDNeuronConfig fields to set (what get_neuron_config chose otherwise)."""

    checkpoint_id: str | None = None
    checkpoint_revision: str | None = None
    batch_size: int | None = None
    max_batch_size: int | None = None
    continuous_batching: bool | None = Field(default=None, description="default: batch_size > 1")
    speculation_length: int | None = None
    sequence_length: int | None = None
    tp_degree: int | None = None
    ep_degree: int | None = None
    pp_degree: int | None = None
    torch_dtype: str | None = None
    n_active_tokens: int | None = None
    max_context_length: int | None = None
    output_logits: bool | None = None
    fused_qkv: bool | None = None
    target: str | None = None
    on_device_sampling: bool | None = None
    max_topk: int | None = None
    start_rank_id: int | None = None
    local_ranks_size: int | None = None
    capacity_factor: float | None = None
    glu_mlp: bool | None = None


class OptimumNeuronOptions(StrictModel):
    """``options:`` of the optimum-neuron backend."""

    neuron_config: OptimumNeuronConfig = Field(
        default_factory=OptimumNeuronConfig,
        description="NxDNeuronConfig fields to override, e.g. {on_device_sampling: false}",
    )
