"""Accuracy of a bundle against the Hugging Face eager model, in the spirit of NxD Inference's logit matching.

``verify_accuracy(bundle_dir, prompts, tol)`` runs, per prompt:

1. the HF eager model (built from the bundle's ``model/config.json`` and its ``weights/``, in the
   bundle's dtype) with greedy ``generate``: the expected tokens and the logits of every step;
2. the bundle teacher-forced on those expected tokens: its logits at every step, so each step is
   compared on the same prefix even after a divergence;
3. the bundle free-running (greedy): the tokens a user of ``neuronc run`` would get.

A prompt passes when the free-running tokens equal HF's and every step's max |Δlogit| is within
``tol``. The report names the first diverging step (token mismatch or logits past ``tol``).
torch and transformers are imported when the check runs, not at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from neuronc.errors import InvalidInputError, VerificationError
from neuronc.jsonfile import JsonFields

DEFAULT_PROMPTS = (
    "The quick brown fox",
    "Hello, world! This is",
    "A compiler turns a model into",
    "Rain fell on the roofs of the old town while",
)
# Max |Δlogit| allowed per step, by dtype: AOTInductor fp32 logits match eager to about 1e-6; bf16
# kernels accumulate in a different order than eager, so their logits differ by up to a few 1e-2.
DEFAULT_TOL = {"float32": 1e-3, "bfloat16": 1e-1, "float16": 5e-2}
DEFAULT_MAX_NEW_TOKENS = 16


class DivergenceJSON(TypedDict):
    step: int
    reason: str
    expected_token: int
    bundle_token: int
    max_abs_diff: float


class PromptAccuracyJSON(TypedDict):
    prompt: str
    prompt_tokens: int
    context_bucket: int
    passed: bool
    tokens_match: bool
    expected_tokens: list[int]
    bundle_tokens: list[int]
    max_abs_diff: float
    step_max_abs_diff: list[float]
    first_divergence: DivergenceJSON | None


class AccuracyJSON(TypedDict):
    """``AccuracyReport.to_json()``: ``accuracy`` in the report of ``neuronc verify --accuracy``."""

    passed: bool
    dtype: str
    tol: float
    max_new_tokens: int
    max_abs_diff: float
    prompts: list[PromptAccuracyJSON]
    seconds: float


class AccuracyError(VerificationError):
    """The bundle diverges from the reference model; ``report`` is the full AccuracyReport JSON."""

    kind = "accuracy_failed"

    def __init__(self, message: str, *, report: AccuracyJSON, details: Sequence[str] = (), hint: str | None = None):
        super().__init__(message, details=details, hint=hint)
        self.report = report

    def to_json(self) -> dict[str, object]:
        data = super().to_json()
        data["accuracy"] = self.report
        return data


@dataclass
class Divergence(JsonFields):
    """The first step where the bundle and the reference disagree."""

    step: int
    reason: str  # "token" (argmax differs) or "logits" (max |Δlogit| above tol)
    expected_token: int
    bundle_token: int
    max_abs_diff: float

    def to_json(self) -> DivergenceJSON:  # type: ignore[override]  # the same fields, typed
        return cast("DivergenceJSON", super().to_json())


@dataclass
class PromptAccuracy:
    prompt: str
    prompt_tokens: int
    context_bucket: int
    expected_tokens: list[int]
    bundle_tokens: list[int]
    step_max_abs_diff: list[float]
    first_divergence: Divergence | None

    @property
    def tokens_match(self) -> bool:
        return self.expected_tokens == self.bundle_tokens

    @property
    def max_abs_diff(self) -> float:
        return max(self.step_max_abs_diff, default=0.0)

    @property
    def passed(self) -> bool:
        return self.tokens_match and self.first_divergence is None

    def to_json(self) -> PromptAccuracyJSON:
        return {
            "prompt": self.prompt,
            "prompt_tokens": self.prompt_tokens,
            "context_bucket": self.context_bucket,
            "passed": self.passed,
            "tokens_match": self.tokens_match,
            "expected_tokens": self.expected_tokens,
            "bundle_tokens": self.bundle_tokens,
            "max_abs_diff": self.max_abs_diff,
            "step_max_abs_diff": self.step_max_abs_diff,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
        }


@dataclass
class AccuracyReport:
    bundle: str
    dtype: str
    tol: float
    max_new_tokens: int
    prompts: list[PromptAccuracy] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.prompts)

    @property
    def max_abs_diff(self) -> float:
        return max((p.max_abs_diff for p in self.prompts), default=0.0)

    def to_json(self) -> AccuracyJSON:
        return {
            "passed": self.passed,
            "dtype": self.dtype,
            "tol": self.tol,
            "max_new_tokens": self.max_new_tokens,
            "max_abs_diff": self.max_abs_diff,
            "prompts": [p.to_json() for p in self.prompts],
            "seconds": round(self.seconds, 3),
        }

    def failure_lines(self) -> list[str]:
        lines = []
        for i, p in enumerate(self.prompts):
            if p.passed:
                continue
            d = p.first_divergence
            where = (
                f"step {d.step}: {d.reason} (expected token {d.expected_token}, bundle {d.bundle_token}, "
                f"max |Δlogit| {d.max_abs_diff:.3g})"
                if d is not None
                else "tokens differ although every step is within tol"
            )
            lines.append(f"prompt {i} {p.prompt!r}: first divergence at {where}")
        return lines

    def raise_for_failure(self) -> None:
        if self.passed:
            return
        failing = sum(not p.passed for p in self.prompts)
        msg = (
            f"{self.bundle}: {failing} of {len(self.prompts)} prompt(s) diverge from the Hugging Face model "
            f"(tol {self.tol:g}, max |Δlogit| {self.max_abs_diff:.3g})"
        )
        hint = "rerun with --json for every step's logits diff"
        raise AccuracyError(msg, report=self.to_json(), details=self.failure_lines(), hint=hint)


def read_prompts(path: str | os.PathLike[str]) -> list[str]:
    """One prompt per non-empty line (a JSON list of strings also works)."""
    import json

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"{p}: cannot read prompts: {exc.strerror}") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidInputError(f"{p}: invalid JSON: {exc}") from None
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise InvalidInputError(f"{p}: a JSON prompts file is a list of strings")
        prompts = [str(x) for x in data]
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise InvalidInputError(f"{p}: no prompts")
    return prompts


def verify_accuracy(
    bundle_dir: str | os.PathLike[str],
    prompts: Sequence[str] | None = None,
    tol: float | None = None,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    runner: Any = None,
) -> AccuracyReport:
    """Compare the bundle with the HF eager model on ``prompts`` (greedy); see the module docstring."""
    import time

    import torch

    from neuronc.runtime import runnable_backend

    started = time.perf_counter()
    root = Path(bundle_dir)
    backend = runnable_backend(root)
    runner = runner if runner is not None else backend.runtime.load(root)
    dtype_name = str(runner.index["dtype"])
    tolerance = DEFAULT_TOL.get(dtype_name, 1e-3) if tol is None else float(tol)
    if tolerance < 0:
        raise InvalidInputError(f"tol must be >= 0, got {tol}")
    # The backend builds what its bundles are compared with (the HF eager model for inductor).
    reference = backend.runtime.reference_model(root, dtype_name)
    eos = sorted(runner.eos_token_ids)
    report = AccuracyReport(str(root), dtype_name, tolerance, max_new_tokens)
    for prompt in list(prompts) if prompts is not None else list(DEFAULT_PROMPTS):
        ids = runner.encode(prompt)
        bucket = runner.context_graph_for(len(ids)).bucket  # raises a clear error past the largest bucket
        budget = min(max_new_tokens, runner.max_length - len(ids))
        if budget < 1:
            raise InvalidInputError(f"prompt {prompt!r} leaves no room to generate within max_length")
        expected, expected_logits = _reference_generate(reference, ids, budget, eos, torch)
        forced = runner.score(ids, expected)
        diffs: list[float] = []
        divergence: Divergence | None = None
        for step, (mine, theirs) in enumerate(zip(forced, expected_logits, strict=True)):
            diff = float((mine.float() - theirs.float()).abs().max())
            diffs.append(diff)
            mine_token = int(torch.argmax(mine))
            if divergence is None and (mine_token != expected[step] or diff > tolerance):
                reason = "token" if mine_token != expected[step] else "logits"
                divergence = Divergence(step, reason, expected[step], mine_token, diff)
        free = runner.generate(ids, max_new_tokens=budget)
        report.prompts.append(
            PromptAccuracy(
                prompt=prompt,
                prompt_tokens=len(ids),
                context_bucket=bucket,
                expected_tokens=expected,
                bundle_tokens=list(free.tokens),
                step_max_abs_diff=diffs,
                first_divergence=divergence,
            )
        )
    report.seconds = time.perf_counter() - started
    return report


def _reference_generate(
    model: Any, ids: Sequence[int], budget: int, eos: Sequence[int], torch: Any
) -> tuple[list[int], list[Any]]:
    input_ids = torch.tensor([list(ids)], dtype=torch.int64)
    with torch.inference_mode():
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=budget,
            do_sample=False,
            eos_token_id=list(eos) or None,
            pad_token_id=(list(eos) or [0])[0],
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = [int(t) for t in out.sequences[0, len(ids) :]]
    return tokens, [step[0] for step in out.logits]


def accuracy_check(
    prompts_file: str | os.PathLike[str] | None = None,
    tol: float | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> Callable[[Path, Any], AccuracyJSON]:
    """A ``neuronc verify`` extra check: ``(bundle_dir, manifest) -> JSON``; raises VerificationError."""
    prompts = read_prompts(prompts_file) if prompts_file is not None else None

    def check(bundle_dir: Path, manifest: Any) -> AccuracyJSON:
        report = verify_accuracy(bundle_dir, prompts, tol, max_new_tokens=max_new_tokens)
        report.raise_for_failure()
        return report.to_json()

    return check
