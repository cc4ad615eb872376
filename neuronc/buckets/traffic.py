"""Traffic as ``neuronc buckets`` reads it: one (prompt tokens, output tokens) pair per request.

Three formats, told apart by their content (a one-line ``{"prompt_tokens": N, "output_tokens": M}``
is a JSONL file of one request, not a spec):

- JSONL, one request per line: ``{"prompt_tokens": N, "output_tokens": M}``, or ``{"prompt": "..."}``
  (tokenized with the model's own ``tokenizer.json`` through the ``tokenizers`` library; the output
  length is then ``output_tokens`` if the line has it, else 0). Blank lines are skipped; any other
  line that is not such an object is an error naming ``file:line``.
- A GuideLLM benchmark report (``guidellm benchmark --output-path report.json``, JSON or YAML): every
  successful request of every benchmark, by its ``prompt_tokens`` and ``output_tokens`` (guidellm 0.8
  ``GenerativeBenchmarksReport.benchmarks[].requests.successful[]``, whose ``GenerativeRequestStats``
  serialises both counts; ``schemas/base/request_stats.py``).
- A GuideLLM synthetic data spec, as a JSON/YAML mapping or guidellm's own ``key=value,...`` string
  (in a file, or given instead of a file name)
  (``prompt_tokens``, ``prompt_tokens_stdev|_min|_max``, ``output_tokens`` and the same suffixes,
  ``samples``; guidellm 0.8 ``SyntheticTextDataArgs``): sampled here as guidellm samples it
  (``utils/random.py`` ``IntegerRangeSampler``: a seeded gauss clipped to [min, max], min default
  ``max(1, mean - 5 stdev)``, max ``mean + 5 stdev``; uniform over [min, max] without a stdev),
  ``samples`` requests (default 1000), seed 42.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronc.errors import InvalidInputError, safe_text

MAX_TRAFFIC_BYTES = 512 * 1024 * 1024
# Requests read from any format (a JSONL file, a report, a synthetic spec's samples): enough for any
# histogram, and a bound on the memory and time a file (or a YAML alias) can make neuronc spend.
MAX_TRAFFIC_REQUESTS = 1_000_000
MAX_SYNTHETIC_SAMPLES = MAX_TRAFFIC_REQUESTS
# A token count beyond this is no request's (the JSONL reader's bound, also for synthetic specs).
MAX_TOKENS = 1 << 20
# Nesting no traffic document needs (a GuideLLM report is about 8 deep).
MAX_DEPTH = 64
DEFAULT_SYNTHETIC_SAMPLES = 1000
SYNTHETIC_SEED = 42
_HINT = (
    'one JSON object per line: {"prompt_tokens": N, "output_tokens": M} or {"prompt": "..."}; '
    "or a GuideLLM benchmark report or synthetic data spec (docs/profiles.md#choosing-buckets)"
)
_LIMIT = {"samples": MAX_SYNTHETIC_SAMPLES}
_SYNTHETIC_KEYS = frozenset(
    f"{kind}_tokens{suffix}" for kind in ("prompt", "output") for suffix in ("", "_stdev", "_min", "_max")
) | {"samples", "kind", "source"}


@dataclass(frozen=True)
class Request:
    """One request: its prompt length and how many tokens it generated (or asks for)."""

    prompt_tokens: int
    output_tokens: int


@dataclass
class Traffic:
    requests: list[Request]
    source: str
    # jsonl | guidellm-report | guidellm-synthetic
    format: str
    # Whether any prompt was tokenized (the tokenizers library was used).
    tokenized: bool = False


Tokenizer = Callable[[str], int]


def load_traffic(path: str | os.PathLike[str], tokenizer: Callable[[], Tokenizer] | None = None) -> Traffic:
    """Read a traffic file; ``tokenizer()`` gives a prompt -> token count function when a line has text.

    Raises InvalidInputError (exit 2) for a missing, empty or malformed file, naming ``file:line``.
    """
    from neuronc.fsutil import read_bytes_limited

    display = str(path)
    try:
        raw = read_bytes_limited(Path(path), MAX_TRAFFIC_BYTES, what="traffic file")
    except FileNotFoundError:
        if "=" in display and "\n" not in display:  # guidellm's --data form, given as the value itself
            return Traffic(synthetic_requests(_arg_string(display, display), display), display, "guidellm-synthetic")
        raise InvalidInputError(f"{display}: no such traffic file", hint=_HINT) from None
    except OSError as exc:
        raise InvalidInputError(f"{display}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{display}:1: not UTF-8 text (byte {exc.start})", hint=_HINT) from None
    if not text.strip():
        raise InvalidInputError(f"{display}: the traffic file is empty", hint=_HINT)
    whole = _whole_document(text, display)
    if isinstance(whole, Mapping) and "benchmarks" in whole:
        return Traffic(_report_requests(whole, display), display, "guidellm-report")
    if isinstance(whole, Mapping) and _is_synthetic_spec(whole, text):
        return Traffic(synthetic_requests(whole, display), display, "guidellm-synthetic")
    if isinstance(whole, str) and "=" in whole and "\n" not in whole.strip():
        return Traffic(synthetic_requests(_arg_string(whole, display), display), display, "guidellm-synthetic")
    return _jsonl(text, display, tokenizer)


def _is_synthetic_spec(whole: Mapping[str, Any], text: str) -> bool:
    """A mapping of synthetic-data keys; a one-line ``{"prompt_tokens": N, "output_tokens": M}`` is one
    JSONL request unless it says ``kind: synthetic_text`` or has a key only a spec has."""
    if "prompt_tokens" not in whole or not _SYNTHETIC_KEYS.issuperset(whole):
        return False
    one_request = set(whole) <= {"prompt_tokens", "output_tokens"} and len(text.strip().splitlines()) == 1
    return whole.get("kind") == "synthetic_text" or not one_request


def _whole_document(text: str, display: str) -> Any:
    """The file as one JSON or YAML document, or None when it is not one (JSONL has several).

    Refused (InvalidInputError): nesting deeper than MAX_DEPTH, and YAML whose aliases expand past
    the size of the text itself (the profile loader's node cap: an alias "bomb" of 18 KB would
    otherwise become millions of requests).
    """
    from neuronc.jsonfile import depth_of

    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(display) from None
    except ValueError:
        pass
    else:
        if text.count("[") + text.count("{") > MAX_DEPTH and depth_of(value, MAX_DEPTH) > MAX_DEPTH:
            raise _too_deep(display)
        return value
    stripped = text.lstrip()
    if stripped.startswith("{") or "\n{" in text:
        return None  # JSON lines: never YAML
    return _yaml_document(text, display, strict=False)


def _too_deep(display: str) -> InvalidInputError:
    return InvalidInputError(f"{display}: nested more than {MAX_DEPTH} levels deep", hint=_HINT)


def _yaml_document(text: str, display: str, *, strict: bool) -> Any:
    """Plain YAML through the profile loader's reader (core tags only, nodes capped); None where the
    text is not YAML, unless ``strict`` (then an InvalidInputError naming ``display``)."""
    import yaml

    from neuronc.jsonfile import depth_of
    from neuronc.profile import MAX_YAML_NODES, TooLarge, YamlTree

    # An honest document has fewer nodes than characters: only aliases can make more.
    tree = YamlTree(display, max_nodes=MAX_YAML_NODES + len(text))
    try:
        value = tree.load(text)
    except TooLarge as exc:
        raise InvalidInputError(f"{display}: {exc}", hint=_HINT) from None
    except RecursionError:
        raise _too_deep(display) from None
    except yaml.YAMLError as exc:
        if not strict:
            return None
        what = getattr(exc, "problem", None) or str(exc)  # a MarkedYAMLError's problem, without the excerpt
        raise InvalidInputError(f"{display}: not valid YAML: {safe_text(what, 200)}", hint=_HINT) from None
    if tree.problems:
        raise InvalidInputError(f"{display}: {tree.problems[0]}", details=tree.problems[1:], hint=_HINT)
    if depth_of(value, MAX_DEPTH) > MAX_DEPTH:
        raise _too_deep(display)
    return value


def _jsonl(text: str, display: str, tokenizer: Callable[[], Tokenizer] | None) -> Traffic:
    requests: list[Request] = []
    count: Tokenizer | None = None
    tokenized = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{display}:{number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise InvalidInputError(f"{where}: not a JSON object: {safe_text(exc, 120)}", hint=_HINT) from None
        if not isinstance(record, dict):
            raise InvalidInputError(f"{where}: expected a JSON object, got {safe_text(line, 60)}", hint=_HINT)
        output = _count(record, "output_tokens", where, required=False, minimum=0)
        if "prompt_tokens" in record:
            prompt = _count(record, "prompt_tokens", where, required=True, minimum=1)
        elif isinstance(record.get("prompt"), str):
            if tokenizer is None:
                raise InvalidInputError(f"{where}: a text prompt, and no tokenizer to count its tokens")
            if count is None:
                count = tokenizer()
            prompt = count(record["prompt"])
            tokenized = True
            if prompt < 1:
                raise InvalidInputError(f"{where}: prompt: the prompt is empty (0 tokens)", hint=_HINT)
        else:
            raise InvalidInputError(f'{where}: needs "prompt_tokens" (an integer) or "prompt" (text)', hint=_HINT)
        requests.append(Request(prompt, output))
        _check_count(requests, display)
    if not requests:
        raise InvalidInputError(f"{display}: the traffic file has no requests", hint=_HINT)
    return Traffic(requests, display, "jsonl", tokenized)


def _count(record: Mapping[str, Any], key: str, where: str, *, required: bool, minimum: int) -> int:
    value = record.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value > 1 << 20:
        got = "nothing" if value is None else safe_text(json.dumps(value), 40)
        raise InvalidInputError(f"{where}: {key}: must be an integer from {minimum} to {1 << 20}, got {got}")
    return value


def _report_requests(report: Mapping[str, Any], display: str) -> list[Request]:
    """Every successful request of a GuideLLM report, by its prompt and output token counts."""
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise InvalidInputError(f"{display}: benchmarks: expected a list (a GuideLLM benchmark report)")
    requests: list[Request] = []
    for b, benchmark in enumerate(benchmarks):
        successful = _at(benchmark, ("requests", "successful"))
        if not isinstance(successful, list):
            raise InvalidInputError(f"{display}: benchmarks[{b}].requests.successful: expected a list of requests")
        for r, stats in enumerate(successful):
            where = f"{display}: benchmarks[{b}].requests.successful[{r}]"
            prompt = _report_count(stats, "prompt_tokens", ("input_metrics", "text_tokens"))
            output = _report_count(stats, "output_tokens", ("output_metrics", "text_tokens"))
            if prompt is None or prompt < 1:
                raise InvalidInputError(f"{where}: no prompt_tokens (GuideLLM records it for every request)")
            requests.append(Request(prompt, output or 0))
            _check_count(requests, display)
    if not requests:
        raise InvalidInputError(f"{display}: the GuideLLM report has no successful requests")
    return requests


def _check_count(requests: list[Request], display: str) -> None:
    if len(requests) > MAX_TRAFFIC_REQUESTS:
        msg = f"{display}: more than {MAX_TRAFFIC_REQUESTS} requests; a sample of the traffic is enough"
        raise InvalidInputError(msg, hint="analyse a sample of the requests (e.g. `shuf -n 100000 FILE`)")


def _at(node: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _report_count(stats: Any, key: str, fallback: tuple[str, ...]) -> int | None:
    value = _at(stats, (key,))
    if value is None:
        value = _at(stats, fallback)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _arg_string(text: str, display: str) -> dict[str, Any]:
    """guidellm's ``prompt_tokens=256,output_tokens=128`` form (``utils/arg_string.py``: comma-separated
    ``key=value``, values read as YAML scalars); only flat keys, which is all a synthetic spec uses."""
    spec: dict[str, Any] = {}
    for pair in text.strip().split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"{display}:1: {safe_text(pair, 40)!r} is not key=value", hint=_HINT)
        where = f"{display}:1: {safe_text(key.strip(), 40)}"  # a value that is not YAML: named by its key
        spec[key.strip()] = _yaml_document(value.strip(), where, strict=True)
    return spec


def synthetic_requests(spec: Mapping[str, Any], display: str) -> list[Request]:
    """Sample a GuideLLM synthetic data spec the way guidellm 0.8 does (see the module docstring)."""
    unknown = sorted(set(spec) - _SYNTHETIC_KEYS)
    if unknown:
        raise InvalidInputError(f"{display}: unknown synthetic data keys: {', '.join(map(str, unknown))}", hint=_HINT)
    values: dict[str, int | None] = {}
    for key in sorted(_SYNTHETIC_KEYS - {"kind", "source"}):
        value = spec.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _LIMIT.get(key, MAX_TOKENS)
        ):
            most = _LIMIT.get(key, MAX_TOKENS)
            raise InvalidInputError(
                f"{display}: {key}: must be an integer from 1 to {most}, got {safe_text(value, 40)}"
            )
        values[key] = value
    samples = values["samples"] or DEFAULT_SYNTHETIC_SAMPLES
    prompt_mean = values["prompt_tokens"]
    if prompt_mean is None:
        raise InvalidInputError(f"{display}: prompt_tokens: required in a synthetic data spec")
    for kind, mean in (("prompt", prompt_mean), ("output", values["output_tokens"])):
        if mean is not None:
            low, high = _range(mean, values, kind)
            if low > high:
                raise InvalidInputError(
                    f"{display}: {kind}_tokens: the minimum {low} is above the maximum {high}",
                    hint=f"{kind}_tokens_min defaults to max(1, mean - 5 stdev), {kind}_tokens_max to mean + 5 stdev",
                )
    prompts = _sampler(prompt_mean, values, "prompt", SYNTHETIC_SEED)
    output_mean = values["output_tokens"]
    outputs = _sampler(output_mean, values, "output", SYNTHETIC_SEED + 1) if output_mean is not None else None
    return [Request(next(prompts), next(outputs) if outputs is not None else 0) for _ in range(samples)]


def _range(mean: int, values: Mapping[str, int | None], kind: str) -> tuple[int, int]:
    """The [min, max] guidellm samples ``kind`` tokens in (its defaults where the spec gives none)."""
    stdev = values[f"{kind}_tokens_stdev"]
    low = values[f"{kind}_tokens_min"]
    high = values[f"{kind}_tokens_max"]
    low = low if low is not None else max(1, mean - 5 * stdev if stdev else mean)
    high = high if high is not None else (mean + 5 * stdev if stdev else mean)
    return low, high


def _sampler(mean: int, values: Mapping[str, int | None], kind: str, seed: int) -> Iterator[int]:
    """guidellm 0.8 ``IntegerRangeSampler``, re-implemented (guidellm is not a dependency)."""
    stdev = values[f"{kind}_tokens_stdev"]
    low, high = _range(mean, values, kind)
    rng = random.Random(seed)
    while True:
        if low == high:
            yield low
        elif not stdev:
            yield rng.randint(low, high)
        else:
            yield round(max(low, min(high, rng.gauss(mean, stdev))))


def prompt_tokenizer(model_dir: Path) -> Tokenizer:
    """A prompt -> token count function from the model's ``tokenizer.json`` (``tokenizers`` only:
    special tokens added by its post-processor, as the runtime's tokenizer adds them)."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        msg = f"{model_dir}: no tokenizer.json to count the prompts' tokens with"
        raise InvalidInputError(msg, hint='give "prompt_tokens" per line instead of "prompt"')
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError as exc:
        from neuronc.errors import MISSING_LIBRARY

        raise MISSING_LIBRARY.convert(
            exc, "counting prompt tokens needs the tokenizers library", hint="pip install tokenizers"
        ) from None
    tokenizer = HfTokenizer.from_file(str(path))
    return lambda text: len(tokenizer.encode(text).ids)


__all__ = ["Request", "Tokenizer", "Traffic", "load_traffic", "prompt_tokenizer", "synthetic_requests"]
