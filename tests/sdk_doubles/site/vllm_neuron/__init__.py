"""SDK double of ``vllm_neuron`` (the vLLM Neuron plugin): present, so the host-install check finds it.

The compile itself is the ``vllm`` double's ``LLM`` (tests/sdk_doubles/site/vllm), which behaves as
the plugin does in CPU compile mode.
"""

SDK_DOUBLE = True
