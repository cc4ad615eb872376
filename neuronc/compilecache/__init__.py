"""The Neuron compile cache: the local one libneuronxla writes, and publishing into a Hub cache repository.

- ``local``: ``neuronc cache status`` / ``cache cleanup`` — the entries of a local compile cache
  (``/var/tmp/neuron-compile-cache``, ``NEURON_COMPILE_CACHE_URL`` or ``--cache-dir``) by state.
- ``publish``: ``neuronc cache synchronize`` — the compiled graphs of bundles, in the layout
  optimum-neuron 0.4.5 reads (``neuronxcc-<ver>/MODULE_*`` and ``0_REGISTRY/<ver>/<digest>/<hash>.json``).

Nothing here imports torch, transformers or the Neuron SDK; huggingface_hub only when uploading.
"""
