"""neuronc: compile LLMs ahead of time for AWS Neuron and ship versioned, verifiable bundles.

Importing this package is cheap: torch, transformers and the Neuron SDK are imported only inside the
functions that need them.
"""

__version__ = "0.1.0"
