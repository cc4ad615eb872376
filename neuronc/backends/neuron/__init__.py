"""The Neuron SDK backends and what they share.

One module per backend (``nxdi``, ``optimum_neuron``, ``transformers_neuronx``, ``torch_neuronx``),
each with its recorded upstream field tables beside it (``nxdi_fields``, ``optimum_fields``,
``nxdi_serving``); ``common`` (the NeuronBackend base: toolchain versions, user neuron_config,
managed keys), ``env`` (the compile environment, LNC), ``files`` (what each SDK writes),
``isolated`` and ``worker`` (the SDK compile in a child process). SDK imports stay inside
functions: importing any of these never imports the Neuron SDK.
"""
