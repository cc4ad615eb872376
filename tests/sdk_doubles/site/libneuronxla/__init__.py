"""SDK double of ``libneuronxla``: present so availability checks find it; compiles nothing."""

SDK_DOUBLE = True
__version__ = "2.2.12677.0"
