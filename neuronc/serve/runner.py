"""What `neuronc serve` asks of a loaded bundle: the runner a backend's runtime returns.

The server never names a backend: it asks the bundle's backend (``Backend.runtime.load``, resolved from
the bundle's manifest by ``neuronc.runtime.runnable_backend``) for a runner, and schedules requests over
this surface. A runner steps a whole batch at once, one position per row, with the K/V cache written at
each row's own positions (what continuous batching needs, ``neuronc.serve.engine``). The inductor
backend's ``InductorRunner`` is one; a backend whose runtime gives another can be served the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class ContextGraph(Protocol):
    """A context-encoding graph: it takes prompts up to ``bucket`` tokens."""

    @property
    def bucket(self) -> int: ...


class ServingRunner(Protocol):
    """A bundle loaded to serve: its shapes, its tokenizer and its batched graph calls."""

    batch_size: int
    max_length: int
    eos_token_ids: frozenset[int]
    # The K/V cache tensors, passed to every context-encoding call after its own inputs.
    kv: list[Any]
    # Seconds from the start of loading until the runner could serve (the server sets it).
    load_seconds: float
    model_dir: Path

    @property
    def context_buckets(self) -> list[int]: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def has_tokenizer(self) -> bool: ...

    @property
    def tokenizer(self) -> Any: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def context_graph_for(self, length: int) -> ContextGraph: ...

    def call(self, graph: Any, *args: Any) -> Any:
        """Call a graph (a context graph: ids, positions, last index per row, then ``kv``); logits [B, V]."""
        ...

    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> Any:
        """One token per row at its position; logits [B, V]."""
        ...

    def warmup(self) -> None: ...


__all__ = ["ContextGraph", "ServingRunner"]
