"""The transformers 4.57 / 5.x differences neuronc bridges (no transformers needed)."""

from __future__ import annotations

from neuronc.hfcompat import legacy_rope_fields


def test_a_4_57_config_needs_no_legacy_fields() -> None:
    assert legacy_rope_fields({"rope_theta": 10000.0, "rope_scaling": None}) == {}
    assert legacy_rope_fields({"model_type": "opt"}) == {}


def test_default_rope_parameters_become_rope_theta_and_no_scaling() -> None:
    config = {"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}
    assert legacy_rope_fields(config) == {"rope_theta": 1000000.0, "rope_scaling": None}


def test_scaled_rope_parameters_keep_every_scaling_key() -> None:
    params = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    assert legacy_rope_fields({"rope_parameters": params}) == {
        "rope_theta": 500000.0,
        "rope_scaling": {k: v for k, v in params.items() if k != "rope_theta"},
    }


def test_per_layer_type_rope_parameters_have_no_4_57_form() -> None:
    per_type = {
        "full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    }
    assert legacy_rope_fields({"rope_parameters": per_type}) == {}
