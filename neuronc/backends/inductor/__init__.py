"""The embedded default backend: torch.export + AOTInductor on CPU (docs/inductor.md).

``backend`` (the Backend: plan, compile through worker processes, load), ``format`` (what every
side agrees on; no torch), ``cache`` (the graph cache), ``graphs`` (the CTE/TKG wrappers and the
export + compile of one graph; imports torch), ``worker`` (the child process that compiles one
graph), ``runner`` (the generation loop), ``runtime`` (loading a bundle into a runner) and ``aoti``
(loading one compiled graph without importing torch._inductor).

Importing this package is cheap: torch and transformers load in the worker and the runtime only.
"""

from typing import TYPE_CHECKING

from neuronc._lazy import lazy_attributes

if TYPE_CHECKING:
    from neuronc.backends.inductor.backend import InductorBackend

__getattr__ = lazy_attributes(__name__, {"InductorBackend": "neuronc.backends.inductor.backend"})

__all__ = ["InductorBackend"]
