"""The exact choice of buckets: at most K buckets minimising the padded tokens of observed lengths.

A length ``v`` observed ``w`` times runs in the smallest bucket ``b >= v`` and pads ``w * (b - v)``
tokens; a length above every bucket does not run (refused or truncated) and is counted apart.

Why this is exact: in an optimal choice every bucket serves a contiguous run of the sorted distinct
lengths, and is the smallest bucket the backend's rule allows that holds the longest of them (any
larger bucket pads more and holds nothing more). So the problem is partitioning the sorted lengths
into at most K runs, each costing ``round_up(v_j) * (W_j - W_{i-1}) - (S_j - S_{i-1})`` (prefix sums
of weights W and of weight x length S) — a dynamic programme over the observed lengths. Its cost
matrix is Monge for any non-decreasing ``round_up`` (cost(a,d) + cost(b,c) - cost(a,c) - cost(b,d)
= (round_up(v_d) - round_up(v_c)) (W_{b-1} - W_{a-1}) >= 0), so each layer's leftmost optimal split
points are monotone and divide and conquer computes a layer in O(n log n) instead of O(n^2): K
layers of up to 8 over tens of thousands of distinct lengths stay well under a second.

Written here rather than taken from a library: this is a small 1-D partition DP with a
backend-specific rounding, which no well-kept library offers (k-means-style 1-D clustering
libraries minimise squared distances, not padding to the right end).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from neuronc.backends.bucket_rules import BucketRule

INF = float("inf")


@dataclass(frozen=True)
class Padding:
    """What a bucket list costs on a histogram of lengths."""

    padded: int  # tokens of padding
    real: int  # tokens of the lengths that ran
    beyond: int  # weight of the lengths above the largest bucket (did not run)

    @property
    def share(self) -> float:
        """Padding as a share of every token computed (padding + real)."""
        total = self.padded + self.real
        return self.padded / total if total else 0.0


def padding(histogram: Mapping[int, int], buckets: Sequence[int]) -> Padding:
    """Padded tokens, real tokens and the weight beyond the largest bucket."""
    ordered = sorted(set(buckets))
    padded = real = beyond = 0
    for length, weight in histogram.items():
        index = bisect.bisect_left(ordered, length)
        if index == len(ordered):
            beyond += weight
        else:
            padded += weight * (ordered[index] - length)
            real += weight * length
    return Padding(padded, real, beyond)


@dataclass(frozen=True)
class Choice:
    """The best buckets with at most ``max_graphs`` of them, and the padding they leave."""

    max_graphs: int
    buckets: tuple[int, ...]
    padded: int


def choose(histogram: Mapping[int, int], rule: BucketRule, max_graphs: int) -> list[Choice]:
    """The optimal bucket list for every K from 1 to ``max_graphs`` (index K-1).

    Lengths the rule cannot hold (above its limit) are left out: no bucket can serve them. With a
    ``fixed`` rule there is nothing to choose; with a forced ``largest`` that bucket is always one of
    the K.
    """
    if max_graphs < 1:
        raise ValueError("max_graphs must be at least 1")
    if rule.fixed is not None:
        fixed = tuple(sorted(rule.fixed))
        cost = padding(histogram, fixed).padded
        return [Choice(k, fixed, cost) for k in range(1, max_graphs + 1)]
    lengths = sorted(v for v, w in histogram.items() if w > 0 and rule.round_up(v) is not None)
    if not lengths:
        smallest = rule.largest if rule.largest is not None else rule.limit
        return [Choice(k, (smallest,), 0) for k in range(1, max_graphs + 1)]
    weights = [histogram[v] for v in lengths]
    return _Partition(lengths, weights, rule).solve(max_graphs)


class _Partition:
    """The divide-and-conquer DP over the sorted distinct lengths (1-based: index 0 is "none")."""

    def __init__(self, lengths: list[int], weights: list[int], rule: BucketRule) -> None:
        self.n = len(lengths)
        self.rule = rule
        self.v = [0, *lengths]
        self.b = [0] + [rule.round_up(v) or 0 for v in lengths]
        self.w_sum = [0] * (self.n + 1)
        self.s_sum = [0] * (self.n + 1)
        for j in range(1, self.n + 1):
            self.w_sum[j] = self.w_sum[j - 1] + weights[j - 1]
            self.s_sum[j] = self.s_sum[j - 1] + weights[j - 1] * lengths[j - 1]

    def cost(self, i: int, j: int, bucket: int | None = None) -> int:
        """Padding of lengths i..j in one bucket (default: the smallest allowed bucket holding v_j)."""
        b = self.b[j] if bucket is None else bucket
        return b * (self.w_sum[j] - self.w_sum[i - 1]) - (self.s_sum[j] - self.s_sum[i - 1])

    def _forced_cost(self, i: int, forced: int) -> float:
        return 0 if i > self.n else self.cost(i, self.n, forced)

    def solve(self, max_graphs: int) -> list[Choice]:
        n = self.n
        forced = self.rule.largest
        layers: list[list[float]] = [[0.0] + [INF] * n]
        splits: list[list[int]] = [[0] * (n + 1)]
        free_layers = max_graphs - 1 if forced is not None else max_graphs
        for _ in range(free_layers):
            layer, split = self._layer(layers[-1])
            layers.append(layer)
            splits.append(split)
        choices: list[Choice] = []
        best: tuple[float, tuple[int, ...]] | None = None
        for k in range(1, max_graphs + 1):
            if forced is not None:
                # The forced bucket serves lengths i..n (none when i = n + 1); k-1 free buckets serve 1..i-1.
                prev = layers[k - 1]
                i = min(range(1, n + 2), key=lambda i: (prev[i - 1] + self._forced_cost(i, forced), i))
                total = prev[i - 1] + self._forced_cost(i, forced)
                buckets = (*self._walk(splits, k - 1, i - 1), forced)
            else:
                total = layers[k][n]
                buckets = self._walk(splits, k, n)
            candidate = (total, tuple(sorted(set(buckets))))
            if best is None or candidate[0] < best[0]:
                best = candidate
            choices.append(Choice(k, best[1], int(best[0])))
        return choices

    def _layer(self, prev: list[float]) -> tuple[list[float], list[int]]:
        """One more bucket: cur[j] = min over i <= j of prev[i-1] + cost(i, j), by divide and conquer."""
        n = self.n
        cur: list[float] = [0.0] + [INF] * n
        split = [0] * (n + 1)
        stack = [(1, n, 1, n)]
        while stack:
            lo, hi, opt_lo, opt_hi = stack.pop()
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            best, best_i = INF, opt_lo
            for i in range(opt_lo, min(mid, opt_hi) + 1):
                value = prev[i - 1] + self.cost(i, mid)
                if value < best:  # leftmost minimum: the monotone one
                    best, best_i = value, i
            cur[mid], split[mid] = best, best_i
            stack.append((lo, mid - 1, opt_lo, best_i))
            stack.append((mid + 1, hi, best_i, opt_hi))
        return cur, split

    def _walk(self, splits: list[list[int]], k: int, j: int) -> tuple[int, ...]:
        """The buckets of the optimal partition of lengths 1..j into k runs (from the split points)."""
        buckets: list[int] = []
        while j > 0 and k > 0:
            i = splits[k][j]
            buckets.append(self.b[j])
            j, k = i - 1, k - 1
        return tuple(reversed(buckets))


__all__ = ["Choice", "Padding", "choose", "padding"]
