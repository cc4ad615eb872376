"""SDK double of ``neuronx_distributed_inference`` (NxD Inference): config classes, the Llama
causal-LM class and the HF adapter, with the signatures of reference/neuron-apis.md §1."""

SDK_DOUBLE = True
