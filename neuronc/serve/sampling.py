"""Choosing each row's next token from a step's logits ``[B, V]``, per request.

Greedy rows (temperature 0) take the argmax, as ``neuronc run`` does (``InductorRunner._pick``), over
the whole batch in one call. Sampled rows divide by their temperature, keep the smallest set of tokens
whose probability reaches ``top_p`` (nucleus sampling, the highest first; the token that crosses the
threshold is kept), and draw with their own ``torch.Generator``: seeded from ``seed`` when the request
gives one, so the same seed and prompt give the same tokens whatever else is in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from neuronc.serve.protocol import Sampling


def generator_for(sampling: Sampling) -> Any:
    """The request's own random stream (None for greedy requests: they draw nothing)."""
    if sampling.greedy:
        return None
    generator = torch.Generator()
    if sampling.seed is None:
        generator.seed()
    else:
        generator.manual_seed(sampling.seed)
    return generator


def pick(logits: Any, rows: Sequence[tuple[int, Sampling, Any]]) -> dict[int, int]:
    """The next token of each (row, sampling, generator) in ``rows``, by row."""
    picked: dict[int, int] = {}
    greedy = [row for row, sampling, _ in rows if sampling.greedy]
    if greedy:
        best = torch.argmax(logits, dim=-1).tolist()
        picked.update({row: int(best[row]) for row in greedy})
    for row, sampling, generator in rows:
        if not sampling.greedy:
            picked[row] = sample(logits[row], sampling.temperature, sampling.top_p, generator)
    return picked


def sample(logits: Any, temperature: float, top_p: float, generator: Any) -> int:
    """One token from a row's logits ``[V]``: softmax(logits / temperature), restricted to the top_p nucleus."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each token
        sorted_probs[before >= top_p] = 0.0
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return int(order[choice].item())
    return int(torch.multinomial(probs, 1, generator=generator).item())
