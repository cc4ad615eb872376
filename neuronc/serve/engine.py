"""The batching scheduler: one thread owns the runner and steps every request in the bundle's batch at once.

Continuous batching, because the graphs allow it: both graphs take a position per row and write each
row's K/V at that row's own positions (``inductor.graphs``), so a row can join or leave between any
two steps. A bundle of batch size B has B slots. Each loop:

1. requests that disconnected are dropped (their slot is free at this step);
2. waiting requests take free slots, first come first served; they are prefilled by context bucket,
   each group in the smallest bucket that holds its longest prompt (one context-encoding call per
   bucket: a prompt's bucket is what ``neuronc run`` would choose for it alone);
3. one token-generation call advances every active row by one token.

While a context graph runs for new rows, rows already decoding must not lose their cache: a
context-encoding call writes K/V for *every* row of the batch at that row's ``position_ids``. A
decoding row at next position ``p`` holds valid K/V at positions ``< p`` only and is given positions
``p, p+1, ...`` (capped at ``max_length - 1``): what is written there is never read, because a decode
step writes position ``p`` before it attends and masks every position past its own. Free rows
decode token 0 at position 0 of their own cache, which their next prefill rewrites.

The limits are the compiled shapes: a request is admitted only if its prompt fits the largest
context bucket and prompt + ``max_tokens`` fits ``max_length`` (checked before it is queued). At
most ``max_queue`` requests wait for a slot; beyond that ``submit`` raises ``QueueFull`` (a 429).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from neuronc.serve.detok import TextTail
from neuronc.serve.protocol import RequestError, Sampling
from neuronc.serve.runner import ServingRunner
from neuronc.serve.sampling import generator_for, pick


class QueueFull(Exception):
    """Every slot is busy and ``max_queue`` requests already wait."""


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


@dataclass
class Event:
    """What the engine tells a request's handler: new text, and at the end why it stopped."""

    text: str
    finish: str | None = None  # "stop" | "length" | "error" when the request is done
    completion_tokens: int = 0
    error: str | None = None


@dataclass
class Job:
    """One admitted request and its place in the batch."""

    prompt_ids: list[int]
    sampling: Sampling
    max_tokens: int
    stream: bool
    notify: Callable[[Event], None]  # called from the engine thread; must be thread-safe
    tokens: list[int] = field(default_factory=list)
    slot: int = -1
    cancelled: bool = False
    done: bool = False
    generator: Any = None
    tail: TextTail | None = None
    queued_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None

    @property
    def position(self) -> int:
        """Where the last generated token is fed: K/V is valid at positions below this."""
        return len(self.prompt_ids) + len(self.tokens) - 1


class Engine:
    """Owns the runner; ``submit`` jobs from any thread, ``close`` to drain and stop."""

    def __init__(self, runner: ServingRunner, *, max_queue: int) -> None:
        self.runner = runner
        self.batch_size = int(runner.batch_size)
        self.max_length = int(runner.max_length)
        self.context_buckets = list(runner.context_buckets)
        self.max_queue = max_queue
        self.eos = frozenset(runner.eos_token_ids)
        self._slots: list[Job | None] = [None] * self.batch_size
        self._waiting: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="neuronc-serve-engine", daemon=True)
        self._ready = threading.Event()
        self._warmup_error: BaseException | None = None
        self.steps = 0
        self.decoded_tokens = 0

    # -- limits -----------------------------------------------------------------------------------
    def check_limits(self, prompt_tokens: int, max_tokens: int | None, field_name: str) -> int:
        """The request's ``max_tokens`` (resolved), or a RequestError naming the compiled limit it exceeds."""
        largest = self.context_buckets[-1]
        if prompt_tokens > largest:
            msg = f"the prompt is {prompt_tokens} tokens; the largest context bucket of this bundle is {largest}"
            raise RequestError(msg, param="prompt" if field_name == "max_tokens" else "messages")
        room = self.max_length - prompt_tokens
        if max_tokens is None:
            if room < 1:
                raise RequestError(f"the prompt is {prompt_tokens} tokens; max_length {self.max_length} leaves none")
            return room
        if max_tokens > room:
            msg = (
                f"prompt ({prompt_tokens} tokens) + {field_name} ({max_tokens}) is {prompt_tokens + max_tokens}; "
                f"this bundle's max_length is {self.max_length}"
            )
            raise RequestError(msg, param=field_name)
        return max_tokens

    # -- the handlers' side -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread and wait until it has called every graph once.

        The warm-up runs in the engine thread itself: the OpenMP threads a graph call uses belong to
        the thread that calls it, and the first call from a new thread pays for starting them
        (about 0.3 s for the demo's first request otherwise).
        """
        self._thread.start()
        self._ready.wait()
        if self._warmup_error is not None:
            raise self._warmup_error

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closing:
                raise ShuttingDown
            # Free slots take waiting jobs at the next step: they do not count against the queue.
            if len(self._waiting) >= self.max_queue + self._slots.count(None):
                raise QueueFull
            self._waiting.append(job)
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """The client went away: the job's slot is freed at the next step."""
        job.cancelled = True
        with self._cond:
            self._cond.notify()

    @property
    def load(self) -> tuple[int, int]:
        """(requests in a slot, requests waiting)."""
        with self._cond:
            return self.batch_size - self._slots.count(None), len(self._waiting)

    def close(self, timeout: float) -> bool:
        """Take no new jobs; let the engine finish what it holds. True if its thread ended within ``timeout``."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort(self) -> None:
        """Cancel every job (after the shutdown bound): the thread then ends at its next step."""
        with self._cond:
            for job in [*self._waiting, *(j for j in self._slots if j is not None)]:
                job.cancelled = True
            self._closing = True
            self._cond.notify()

    # -- the engine thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.runner.warmup()
        except BaseException as exc:  # handed to start(), in the main thread
            self._warmup_error = exc
            return
        finally:
            self._ready.set()
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not self._closing and not self._waiting and all(j is None for j in self._slots):
                        self._cond.wait()
                    self._drop_cancelled()
                    if self._closing and not self._waiting and all(j is None for j in self._slots):
                        return
                    admitted = self._admit()
                try:
                    if admitted:
                        self._prefill(admitted)
                    if any(j is not None and not j.done for j in self._slots):
                        self._step()
                except Exception as exc:  # a graph call failed: fail what was in the batch, keep serving
                    self._fail_all(f"{type(exc).__name__}: {exc}")
                with self._cond:
                    for i, job in enumerate(self._slots):
                        if job is not None and job.done:
                            self._slots[i] = None

    def _drop_cancelled(self) -> None:
        self._waiting = collections.deque(j for j in self._waiting if not j.cancelled)
        for i, job in enumerate(self._slots):
            if job is not None and job.cancelled:
                job.done = True
                self._slots[i] = None

    def _admit(self) -> list[Job]:
        admitted = []
        for i in range(self.batch_size):
            if self._slots[i] is None and self._waiting:
                job = self._waiting.popleft()
                job.slot = i
                job.generator = generator_for(job.sampling)
                self._slots[i] = job
                admitted.append(job)
        return admitted

    def _prefill(self, admitted: Sequence[Job]) -> None:
        groups: dict[int, list[Job]] = {}
        for job in admitted:
            graph = self.runner.context_graph_for(len(job.prompt_ids))
            groups.setdefault(graph.bucket, []).append(job)
        pending = {id(j) for j in admitted}
        for bucket in sorted(groups):
            jobs = groups[bucket]
            graph = self.runner.context_graph_for(bucket)
            ids = [[0] * bucket for _ in range(self.batch_size)]
            positions = [list(range(bucket)) for _ in range(self.batch_size)]
            last = [0] * self.batch_size
            for job in jobs:
                ids[job.slot][: len(job.prompt_ids)] = job.prompt_ids
                last[job.slot] = len(job.prompt_ids) - 1
                pending.discard(id(job))
            for i, other in enumerate(self._slots):
                if other is not None and other.tokens and id(other) not in pending:
                    start = other.position  # a decoding row: scratch positions at and past its next one
                    positions[i] = [min(start + j, self.max_length - 1) for j in range(bucket)]
            logits = self.runner.call(
                graph,
                torch.tensor(ids, dtype=torch.int64),
                torch.tensor(positions, dtype=torch.int64),
                torch.tensor(last, dtype=torch.int64),
                *self.runner.kv,
            )
            now = time.perf_counter()
            chosen = pick(logits, [(j.slot, j.sampling, j.generator) for j in jobs])
            for job in jobs:
                job.first_token_at = now
                self._append(job, chosen[job.slot])

    def _step(self) -> None:
        active = [j for j in self._slots if j is not None and not j.done]
        tokens = [0] * self.batch_size
        positions = [0] * self.batch_size
        for job in active:
            tokens[job.slot] = job.tokens[-1]
            positions[job.slot] = job.position
        logits = self.runner.step(tokens, positions)
        chosen = pick(logits, [(j.slot, j.sampling, j.generator) for j in active])
        self.steps += 1
        self.decoded_tokens += len(active)
        for job in active:
            self._append(job, chosen[job.slot])

    def _append(self, job: Job, token: int) -> None:
        """Add one token to a job; send what text it may; finish it on EOS, max_tokens or a stop string."""
        job.tokens.append(token)
        finish = None
        if not job.sampling.ignore_eos and token in self.eos:
            finish = "stop"
        elif len(job.tokens) >= job.max_tokens:
            finish = "length"
        if job.tail is None:
            job.tail = TextTail(self.runner.decode, job.sampling.stop)
        if job.stream or job.sampling.stop or finish is not None:
            text, stopped = job.tail.advance(job.tokens, final=finish is not None)
            if stopped:
                finish = "stop"
        else:
            text = ""
        if finish is not None:
            job.done = True
            job.notify(Event(job.tail.text if not job.stream else text, finish, len(job.tokens)))
        elif job.stream and text:
            job.notify(Event(text, None, len(job.tokens)))

    def _fail_all(self, message: str) -> None:
        for job in self._slots:
            if job is not None and not job.done:
                job.done = True
                job.notify(Event("", "error", len(job.tokens), error=message))
