"""The vllm-neuron backend (Trn2/Trn3, Neuron SDK 2.31+): the plugin's compile cache, prebuilt."""
