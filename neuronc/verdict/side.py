"""What serves a bundle (an image or this host), as the verdict compares it: the type is the backends
layer's (``neuronc.backends.serving``, where each family's serving capability reads it); ``image.py``
builds one for an image, ``neuronc.verdict`` one for this host."""

from __future__ import annotations

from neuronc.backends.serving import ServingSide

__all__ = ["ServingSide"]
