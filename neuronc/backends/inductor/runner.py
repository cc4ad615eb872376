"""A loaded inductor bundle: the generation loop over its compiled graphs (``InductorRunner``).

The runner owns what the graphs do not: tokenisation, right padding to a context bucket, positions,
one static KV cache shared by every graph (``[B, KVH, max_length, D]`` per layer, mutated in place
by the graphs), the choice of graph per step, sampling and streaming. Each call's inputs are checked
against the graph's recorded shapes and dtypes first, so a wrong shape is a Python error, not a
crash inside the compiled code. ``inductor.runtime`` loads bundles into runners.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN
from neuronc.errors import BundleFormatError, InvalidInputError

if TYPE_CHECKING:
    from neuronc.backends.inductor.tokenizer import TextTokenizer

DTYPES: dict[str, Any] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
}

StreamCallback = Callable[[str], None]


@dataclass
class Generation:
    """One generated sequence and how long it took."""

    prompt_ids: list[int]
    tokens: list[int]
    text: str
    context_bucket: int
    ttft_ms: float
    ms_per_token: float | None
    total_ms: float
    stop_reason: str
    logits: list[Any] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": len(self.prompt_ids),
            "context_bucket": self.context_bucket,
            "tokens": self.tokens,
            "text": self.text,
            "generated_tokens": len(self.tokens),
            "stop_reason": self.stop_reason,
            "ttft_ms": round(self.ttft_ms, 3),
            "ms_per_token": None if self.ms_per_token is None else round(self.ms_per_token, 3),
            "total_ms": round(self.total_ms, 3),
        }


@dataclass
class LoadedGraph:
    name: str
    role: str
    batch: int
    bucket: int
    inputs: list[dict[str, Any]]
    output: dict[str, Any]
    model: Any = field(repr=False)
    # (name, shape, dtype) of every input, resolved once: ``call`` checks them on every step.
    checks: list[tuple[str, Any, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.checks = [(s["name"], torch.Size(s["shape"]), DTYPES[s["dtype"]]) for s in self.inputs]


class InductorRunner:
    """A loaded bundle: ``generate()`` text or token ids; ``prefill``/``step`` for finer control."""

    def __init__(
        self,
        bundle_dir: Path,
        index: Mapping[str, Any],
        graphs: list[LoadedGraph],
        constants: dict[str, Any],
        model_config: Mapping[str, Any],
        eos_token_ids: frozenset[int],
        load_seconds: float,
        model_dir: Path | None = None,
    ) -> None:
        self.bundle_dir = bundle_dir
        self.model_dir = model_dir if model_dir is not None else bundle_dir / "model"
        self.index = dict(index)
        self.graphs = graphs
        self.model_config = dict(model_config)
        self.eos_token_ids = eos_token_ids
        self.load_seconds = load_seconds
        self.dtype = DTYPES[str(index["dtype"])]
        self.batch_size = int(index["batch_size"])
        self.max_length = int(index["max_length"])
        self._constants = constants  # the graphs hold raw pointers into these (user_managed=True)
        self._cte = sorted((g for g in graphs if g.role == ROLE_CONTEXT), key=lambda g: g.bucket)
        self._tkg = sorted((g for g in graphs if g.role == ROLE_TOKEN), key=lambda g: g.bucket)
        if not self._cte or not self._tkg:
            raise BundleFormatError(f"{bundle_dir}: the bundle needs at least one context and one token graph")
        kv_specs = [s for s in self._cte[0].inputs if s["name"][:2] in ("k_", "v_")]
        self.kv = [torch.zeros(s["shape"], dtype=DTYPES[s["dtype"]]) for s in kv_specs]
        self._tokenizer: TextTokenizer | None = None

    # -- shapes ----------------------------------------------------------------------------------
    @property
    def context_buckets(self) -> list[int]:
        return [g.bucket for g in self._cte]

    @property
    def token_buckets(self) -> list[int]:
        return [g.bucket for g in self._tkg]

    @property
    def vocab_size(self) -> int:
        return int(self._cte[0].output["shape"][-1])

    def context_graph_for(self, length: int) -> LoadedGraph:
        """The smallest context bucket that holds ``length`` prompt tokens."""
        for graph in self._cte:
            if graph.bucket >= length:
                return graph
        largest = self._cte[-1].bucket
        msg = f"the prompt is {length} tokens; the largest context bucket of this bundle is {largest}"
        raise InvalidInputError(msg, hint="shorten the prompt, or compile with a larger sequence.context_buckets")

    def token_graph_for(self, position: int) -> LoadedGraph:
        """The smallest token bucket (KV window) that contains ``position``."""
        for graph in self._tkg:
            if position < graph.bucket:
                return graph
        msg = f"position {position} is past max_length {self.max_length}"
        raise InvalidInputError(msg)

    # -- tokenizer -------------------------------------------------------------------------------
    @property
    def has_tokenizer(self) -> bool:
        model_dir = self.model_dir
        return any((model_dir / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))

    @property
    def tokenizer(self) -> TextTokenizer:
        """The bundle's tokenizer: ``tokenizers`` on its tokenizer.json where that is all it takes."""
        if self._tokenizer is None:
            from neuronc.backends.inductor.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.model_dir)
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    # -- graph calls -----------------------------------------------------------------------------
    def call(self, graph: LoadedGraph, *args: Any) -> Any:
        """Call a graph after checking every input's shape and dtype against what it was compiled for."""
        if len(args) != len(graph.inputs):
            msg = f"graph {graph.name}: {len(args)} inputs given, {len(graph.inputs)} expected"
            raise InvalidInputError(msg)
        for value, (name, shape, dtype) in zip(args, graph.checks, strict=True):
            if not isinstance(value, torch.Tensor):
                raise InvalidInputError(f"graph {graph.name}: input {name} is not a tensor")
            if value.shape != shape or value.dtype != dtype:
                got = f"{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
                expected = f"{list(shape)} {str(dtype).removeprefix('torch.')}"
                raise InvalidInputError(f"graph {graph.name}: input {name} is {got}, expected {expected}")
            if value.device.type != "cpu" or not value.is_contiguous():
                raise InvalidInputError(f"graph {graph.name}: input {name} must be a contiguous CPU tensor")
        return graph.model(*args)

    def prefill(self, rows: Sequence[Sequence[int]]) -> tuple[Any, int]:
        """Run the context graph for up to ``batch_size`` prompts; return (logits [B,V], bucket)."""
        lengths = [len(r) for r in rows]
        if not rows or len(rows) > self.batch_size:
            raise InvalidInputError(f"give 1 to {self.batch_size} prompts, got {len(rows)}")
        if min(lengths) < 1:
            raise InvalidInputError("a prompt needs at least one token")
        graph = self.context_graph_for(max(lengths))
        bucket = graph.bucket
        # Each input made by one torch.tensor call from Python lists (right-padded with 0; the rows
        # past len(rows) all 0). Measured on the demo model at bucket 8, one thread: 160 us a prefill;
        # 187 us with ``arange(bucket).repeat(B, 1)`` as the positions (the compiled call itself
        # runs slower on that tensor; why was not found); ~20 us more with zeros filled in place.
        idle = self.batch_size - len(rows)
        ids = torch.tensor(
            [[*row, *[0] * (bucket - len(row))] for row in rows] + [[0] * bucket] * idle, dtype=torch.int64
        )
        positions = torch.tensor([list(range(bucket))] * self.batch_size, dtype=torch.int64)
        last = torch.tensor([n - 1 for n in lengths] + [0] * idle, dtype=torch.int64)
        with torch.inference_mode():
            logits = self.call(graph, ids, positions, last, *self.kv)
        return logits, bucket

    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> Any:
        """One token-generation step: token ``tokens[i]`` at ``positions[i]`` per row; logits [B,V]."""
        if len(tokens) != len(positions) or not tokens or len(tokens) > self.batch_size:
            raise InvalidInputError(f"give 1 to {self.batch_size} (token, position) pairs")
        if min(positions) < 0:
            raise InvalidInputError("positions must be >= 0")
        graph = self.token_graph_for(max(positions))
        idle = [[0]] * (self.batch_size - len(tokens))  # rows past len(tokens): token 0 at position 0
        ids = torch.tensor([[int(t)] for t in tokens] + idle, dtype=torch.int64)
        pos = torch.tensor([[int(p)] for p in positions] + idle, dtype=torch.int64)
        with torch.inference_mode():
            return self.call(graph, ids, pos, *self.kv)

    def warmup(self) -> None:
        """Call every graph once: the first call of an AOTInductor model pays one-time set-up costs.

        The K/V it writes are never read: prefill rewrites positions 0..S-1 and decode masks
        every position past its own.
        """
        for graph in self._cte:
            ids = torch.zeros((self.batch_size, graph.bucket), dtype=torch.int64)
            positions = torch.arange(graph.bucket, dtype=torch.int64).repeat(self.batch_size, 1)
            last = torch.zeros(self.batch_size, dtype=torch.int64)
            with torch.inference_mode():
                self.call(graph, ids, positions, last, *self.kv)
        for graph in self._tkg:
            zeros = torch.zeros((self.batch_size, 1), dtype=torch.int64)
            with torch.inference_mode():
                self.call(graph, zeros, zeros.clone(), *self.kv)

    # -- generation ------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        seed: int | None = None,
        stream: StreamCallback | None = None,
        *,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
    ) -> Generation:
        """Generate from one prompt (text or token ids): greedy at temperature 0, else sampled."""
        return self.generate_batch(
            [prompt],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            stream=stream,
            stop_at_eos=stop_at_eos,
            keep_logits=keep_logits,
        )[0]

    def generate_batch(
        self,
        prompts: Sequence[str | Sequence[int]],
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        seed: int | None = None,
        stream: StreamCallback | None = None,
        *,
        stop_at_eos: bool = True,
        keep_logits: bool = False,
    ) -> list[Generation]:
        """Generate for up to ``batch_size`` prompts of any lengths at once (rows stop independently).

        ``stream`` receives the text of the first row as it is generated.
        """
        if max_new_tokens < 1:
            raise InvalidInputError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if temperature < 0:
            raise InvalidInputError(f"temperature must be >= 0, got {temperature}")
        rows = [self.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        for row in rows:
            self.context_graph_for(len(row))  # a clear error past the largest context bucket
            if len(row) >= self.max_length:
                msg = f"the prompt is {len(row)} tokens; max_length {self.max_length} leaves no room to generate"
                raise InvalidInputError(msg)
            if any(t < 0 or t >= self.vocab_size for t in row):
                raise InvalidInputError(f"token ids must be in [0, {self.vocab_size})")
        budgets = [min(max_new_tokens, self.max_length - len(r)) for r in rows]
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        streamer = _TextStream(self, stream) if stream is not None else None

        started = time.perf_counter()
        logits, bucket = self.prefill(rows)
        picked = self._pick(logits, temperature, generator)
        outputs: list[list[int]] = [[picked[i]] for i in range(len(rows))]
        kept: list[list[Any]] = [[logits[i].clone()] if keep_logits else [] for i in range(len(rows))]
        ttft = time.perf_counter() - started
        stops = ["" for _ in rows]
        if streamer is not None:
            streamer.update(outputs[0])

        def finished(i: int) -> bool:
            if stop_at_eos and outputs[i][-1] in self.eos_token_ids:
                stops[i] = stops[i] or "eos"
                return True
            if len(outputs[i]) >= budgets[i]:
                stops[i] = stops[i] or ("max_new_tokens" if budgets[i] == max_new_tokens else "max_length")
                return True
            return False

        step_seconds: list[float] = []
        active = [not finished(i) for i in range(len(rows))]
        while any(active):
            step_started = time.perf_counter()
            tokens = [outputs[i][-1] if active[i] else 0 for i in range(len(rows))]
            # A row that is done idles at position 0 of its own cache: harmless, its output is ignored.
            positions = [len(rows[i]) + len(outputs[i]) - 1 if active[i] else 0 for i in range(len(rows))]
            logits = self.step(tokens, positions)
            picked = self._pick(logits, temperature, generator)
            for i in range(len(rows)):
                if active[i]:
                    outputs[i].append(picked[i])
                    if keep_logits:
                        kept[i].append(logits[i].clone())
                    active[i] = not finished(i)
            step_seconds.append(time.perf_counter() - step_started)
            if streamer is not None:
                streamer.update(outputs[0])
        total = time.perf_counter() - started
        if streamer is not None:
            streamer.finish(outputs[0])

        ms_per_token = 1000 * sum(step_seconds) / len(step_seconds) if step_seconds else None
        has_tokenizer = any(isinstance(p, str) for p in prompts) or self.has_tokenizer
        return [
            Generation(
                prompt_ids=rows[i],
                tokens=outputs[i],
                text=self.decode(outputs[i]) if has_tokenizer else "",
                context_bucket=bucket,
                ttft_ms=1000 * ttft,
                ms_per_token=ms_per_token,
                total_ms=1000 * total,
                stop_reason=stops[i],
                logits=kept[i],
            )
            for i in range(len(rows))
        ]

    def score(self, prompt_ids: Sequence[int], forced: Sequence[int]) -> list[Any]:
        """Teacher-forced logits: step 0 from the prompt, step i after feeding ``forced[:i]``."""
        if not forced:
            return []
        if len(prompt_ids) + len(forced) > self.max_length:
            raise InvalidInputError(f"prompt + forced tokens exceed max_length {self.max_length}")
        logits, _ = self.prefill([list(prompt_ids)])
        result = [logits[0].clone()]
        for i, token in enumerate(forced[:-1]):
            logits = self.step([int(token)], [len(prompt_ids) + i])
            result.append(logits[0].clone())
        return result

    @staticmethod
    def _pick(logits: Any, temperature: float, generator: Any) -> list[int]:
        if temperature == 0:
            return [int(t) for t in torch.argmax(logits, dim=-1)]
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        return [int(t) for t in torch.multinomial(probs, 1, generator=generator)[:, 0]]


class _TextStream:
    """Incremental detokenisation: emit only the new suffix, holding back an incomplete character."""

    def __init__(self, runner: InductorRunner, callback: StreamCallback) -> None:
        self._runner = runner
        self._callback = callback
        self._emitted = ""

    def update(self, ids: Sequence[int], final: bool = False) -> None:
        text = self._runner.decode(ids)
        if not final and text.endswith("\ufffd"):
            return
        if text.startswith(self._emitted) and len(text) > len(self._emitted):
            self._callback(text[len(self._emitted) :])
            self._emitted = text

    def finish(self, ids: Sequence[int]) -> None:
        self.update(ids, final=True)
