"""Buckets from traffic: the sequence buckets real requests need, chosen exactly (``neuronc buckets``).

``analyse_profile(profile, traffic)`` loads a profile build and a traffic file and returns an
``Analysis``: the current buckets' padding, refusals and compile cost, the optimal buckets with at
most K graphs of each kind within the backend's rules (``Backend.rules.bucket_rules``), and the curve for
K = 1..8. ``plan_traffic`` adds each build's coverage and padding share to `neuronc plan`.

Importing this package imports neither torch nor transformers; prompts given as text are counted
with the ``tokenizers`` library on the model's ``tokenizer.json``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.buckets.report import (
    CURVE_MAX,
    DEFAULT_MAX_GRAPHS,
    Analysis,
    CompileRecords,
    Figures,
    analyse,
    context_histogram,
    effective,
    token_histogram,
)
from neuronc.buckets.solve import Choice, Padding, choose, padding
from neuronc.buckets.traffic import Request, Traffic, load_traffic, prompt_tokenizer
from neuronc.errors import InvalidInputError

if TYPE_CHECKING:
    from neuronc.build import Build
    from neuronc.spec import BuildSpec


def tokenizer_for(spec: BuildSpec) -> Callable[[], Callable[[str], int]]:
    """A loader of the build's model's tokenizer (a local directory, else the local Hugging Face cache)."""

    def load() -> Callable[[str], int]:
        from neuronc.model.files import local_model_dir
        from neuronc.model.hfcache import cached_snapshot

        base = Path(spec.profile_path).parent if spec.profile_path else None
        directory = local_model_dir(spec.model.id, base)
        if directory is None and "/" in spec.model.id:
            directory = cached_snapshot(spec.model.id, spec.model.revision)
        if directory is None:
            msg = f"model {spec.model.id} is not on this machine: its tokenizer cannot count the prompts' tokens"
            raise InvalidInputError(msg, hint='give "prompt_tokens" per line, or download the model first')
        return prompt_tokenizer(directory)

    return load


def analyse_profile(
    profile: str | os.PathLike[str],
    traffic_path: str | os.PathLike[str],
    *,
    build: int = 0,
    max_graphs: int = DEFAULT_MAX_GRAPHS,
    store: Any = None,
) -> Analysis:
    """Load the profile's build ``build`` and the traffic; analyse the buckets (see ``analyse``)."""
    from neuronc.profile import load_profile

    loaded = load_profile(profile)
    if not 0 <= build < len(loaded.builds):
        count = len(loaded.builds)
        raise InvalidInputError(
            f"--build {build}: {profile} has {count} build{'s' if count != 1 else ''} (0 to {count - 1})"
        )
    chosen = loaded.builds[build]
    spec = chosen.spec
    traffic = load_traffic(traffic_path, tokenizer_for(spec))
    records, note = CompileRecords.from_store(spec, store)
    analysis = analyse(spec, chosen.backend, traffic, max_graphs=max_graphs, records=records)
    if note:
        analysis.notes.append(note)
    if len(loaded.builds) > 1:
        analysis.notes.append(f"{profile} has {len(loaded.builds)} builds; this is build {build} (--build N)")
    return analysis


def plan_traffic(builds: Sequence[Build], rows: list[dict[str, Any]], traffic_path: str | os.PathLike[str]) -> None:
    """Add ``traffic`` to each `neuronc plan` row: the share of requests its buckets serve and the
    share of padding (context and token generation), as ``neuronc buckets`` counts them."""
    loaded: dict[tuple[str, str | None, str | None], Traffic] = {}
    for build, row in zip(builds, rows, strict=True):
        spec = build.spec
        # Text prompts are counted with each model's own tokenizer: one load per model.
        base = str(Path(spec.profile_path).parent) if spec.profile_path else None
        key = (spec.model.id, spec.model.revision, base)
        if key not in loaded:
            loaded[key] = load_traffic(traffic_path, tokenizer_for(spec))
        traffic = loaded[key]
        rules = build.backend.rules.bucket_rules(spec)
        seq = spec.sequence
        context = effective(seq.context_buckets, rules.context)
        token = effective(seq.token_buckets, rules.token)
        requests = traffic.requests
        ctx = padding(context_histogram(requests), context)
        tok = padding(token_histogram(requests, min(context[-1], seq.max_context_length), rules.token.limit), token)
        served = sum(
            1 for r in requests if r.prompt_tokens <= context[-1] and r.prompt_tokens + r.output_tokens <= token[-1]
        )
        padded, real = ctx.padded + tok.padded, ctx.real + tok.real
        row["traffic"] = {
            "source": traffic.source,
            "requests": len(requests),
            "coverage": round(served / len(requests), 6),
            "requests_beyond": len(requests) - served,
            "padded_share": round(padded / (padded + real), 6) if padded + real else 0.0,
            "context_padded_share": round(ctx.share, 6),
            "token_padded_share": round(tok.share, 6),
        }


def traffic_line(row: dict[str, Any]) -> str | None:
    """`neuronc plan`'s line for a row's ``traffic`` (None without one)."""
    t = row.get("traffic")
    if not t:
        return None
    return (
        f"  traffic ({t['requests']} requests): {t['coverage']:.1%} served, {t['requests_beyond']} beyond the largest "
        f"bucket; padding {t['padded_share']:.1%} (context {t['context_padded_share']:.1%}, "
        f"token generation {t['token_padded_share']:.1%})"
    )


__all__ = [
    "CURVE_MAX",
    "DEFAULT_MAX_GRAPHS",
    "Analysis",
    "Choice",
    "CompileRecords",
    "Figures",
    "Padding",
    "Request",
    "Traffic",
    "analyse",
    "analyse_profile",
    "choose",
    "load_traffic",
    "padding",
    "plan_traffic",
    "tokenizer_for",
    "traffic_line",
]
