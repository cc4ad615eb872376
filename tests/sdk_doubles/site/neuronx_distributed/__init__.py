"""SDK double of ``neuronx_distributed``: present so NxD Inference's double can import it."""

SDK_DOUBLE = True
