"""SDK double of ``neuronx_distributed_inference`` (NxD Inference): config classes, the Llama
causal-LM class and the HF adapter, with the signatures of aws-neuron/neuronx-distributed-inference
(src/neuronx_distributed_inference/models/config.py, models/llama/modeling_llama.py, utils/hf_adapter.py)."""

SDK_DOUBLE = True
