"""SDK double of ``neuronxcc`` (the neuronx-cc compiler package): only its version."""

SDK_DOUBLE = True
__version__ = "2.21.33363.0+82129205"
