"""The request bodies `neuronc serve` accepts, checked field by field, and the documents it answers with.

Fields follow the OpenAI API (``/v1/completions``, ``/v1/chat/completions``): ``max_tokens`` (default
16 for completions; for chat, what the bundle's ``max_length`` leaves), ``temperature`` (0 to 2, default
1; 0 is greedy), ``top_p`` (0 exclusive to 1), ``stop`` (a string or up to 4), ``seed``, ``stream`` and
``stream_options.include_usage``. Two of vLLM's extensions that GuideLLM 0.8.1 sends are honoured:
``ignore_eos`` and ``stream_options.continuous_usage_stats`` (usage on every chunk). Options that
would change the result in ways this server does not implement (``n`` > 1, ``logprobs``, ``echo``,
``suffix``, penalties, ``logit_bias``, tools) are refused with a 400 naming the field rather than
ignored; fields the API lists as informational (``user``, ``metadata``...) and unknown fields are
ignored, as vLLM does.

Nothing here imports torch: checking a request costs microseconds.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

MAX_BODY_BYTES = 1 << 20
MAX_STOP_SEQUENCES = 4
DEFAULT_COMPLETION_TOKENS = 16

Kind = Literal["completion", "chat"]


class RequestError(Exception):
    """A request the server refuses: an HTTP status, the field at fault (or None) and why."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, kind: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind or {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
            status, "server_error"
        )

    def to_json(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class Sampling:
    """How one request chooses its tokens and when it stops."""

    max_tokens: int | None  # None: what max_length leaves (chat only)
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    ignore_eos: bool

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class GenerationRequest:
    """One checked request body."""

    kind: Kind
    model: str | None
    prompt: str | tuple[int, ...] | None  # completions
    messages: tuple[dict[str, str], ...]  # chat: role + content (text only)
    sampling: Sampling
    stream: bool
    include_usage: bool
    continuous_usage: bool


# Options whose non-default values this server does not implement: refused, never silently ignored.
_UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "n": (1,),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    "logprobs": (False, 0),
    "top_logprobs": (0,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": ({},),
    "tools": ([],),
    "functions": ([],),
}


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body (a RequestError naming what is wrong otherwise)."""
    if len(raw) > MAX_BODY_BYTES:
        raise RequestError(f"the request body is {len(raw)} bytes; at most {MAX_BODY_BYTES}", status=413)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not JSON: {exc}", param="body") from None
    if not isinstance(data, dict):
        raise RequestError(f"the request body must be a JSON object, not {type(data).__name__}", param="body")
    return data


def parse_request(data: Mapping[str, Any], kind: Kind) -> GenerationRequest:
    """Check every field this server reads; the first bad one is a RequestError that names it."""
    for name, allowed in _UNSUPPORTED.items():
        value = data.get(name)
        if value is not None and not any(value == a and type(value) is type(a) for a in allowed):
            shown = json.dumps(value)[:80]
            raise RequestError(f"{name}={shown} is not supported by neuronc serve", param=name)
    model = _optional(data, "model", str)
    if kind == "completion":
        prompt: str | tuple[int, ...] | None = _prompt(data.get("prompt"))
        messages: tuple[dict[str, str], ...] = ()
        max_tokens = _max_tokens(data, "max_tokens", DEFAULT_COMPLETION_TOKENS)
    else:
        prompt = None
        messages = _messages(data.get("messages"))
        # max_completion_tokens is the newer name; the older one is still accepted.
        name = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = _max_tokens(data, name, None)
    temperature = _number(data, "temperature", 1.0, low=0.0, high=2.0)
    top_p = _number(data, "top_p", 1.0, low=0.0, high=1.0)
    if top_p == 0.0:
        raise RequestError("top_p must be greater than 0 (and at most 1)", param="top_p")
    seed = _optional(data, "seed", int)
    stream = bool(_optional(data, "stream", bool) or False)
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    options = options or {}
    if options and not stream:
        raise RequestError("stream_options is only allowed with stream=true", param="stream_options")
    include_usage = _flag(options, "include_usage", "stream_options.include_usage")
    continuous = _flag(options, "continuous_usage_stats", "stream_options.continuous_usage_stats")
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=_stop(data.get("stop")),
        seed=seed,
        ignore_eos=bool(_optional(data, "ignore_eos", bool) or False),
    )
    return GenerationRequest(kind, model, prompt, messages, sampling, stream, include_usage, continuous)


def _optional(data: Mapping[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if value is None:
        return None
    # bool is an int to Python, never to JSON's readers: true is not a seed
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RequestError(f"{name} must be {_TYPE_NAMES[kind]}, got {json.dumps(value)[:80]}", param=name)
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean"}


def _flag(data: Mapping[str, Any], name: str, shown: str) -> bool:
    value = data.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{shown} must be a boolean", param=shown)
    return value


def _number(data: Mapping[str, Any], name: str, default: float, *, low: float, high: float) -> float:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number, got {json.dumps(value)[:80]}", param=name)
    if not low <= value <= high:
        raise RequestError(f"{name} must be between {low:g} and {high:g}, got {value}", param=name)
    return float(value)


def _max_tokens(data: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = _optional(data, name, int)
    if value is None:
        return default
    if value < 1:
        raise RequestError(f"{name} must be at least 1, got {value}", param=name)
    return int(value)


def _prompt(value: Any) -> str | tuple[int, ...]:
    """A string, a list of token ids, or a list holding one of those (OpenAI's batch form, one prompt)."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise RequestError("prompt must not be empty", param="prompt")
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return tuple(value)
    if isinstance(value, list) and len(value) > 1 and all(isinstance(p, str | list) for p in value):
        raise RequestError("one prompt per request (send several requests; they are batched)", param="prompt")
    if value is None:
        raise RequestError("prompt is required", param="prompt")
    raise RequestError("prompt must be a non-empty string or a list of token ids", param="prompt")


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise RequestError("stop must be a non-empty string or a list of them", param="stop")
    if len(value) > MAX_STOP_SEQUENCES:
        raise RequestError(f"stop holds {len(value)} sequences; at most {MAX_STOP_SEQUENCES}", param="stop")
    return tuple(value)


def _messages(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise RequestError("messages must be a non-empty list", param="messages")
    result = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(f"{where} must be an object", param=where)
        role = message.get("role")
        if role not in ("system", "user", "assistant", "developer"):
            raise RequestError(f"{where}.role must be system, developer, user or assistant", param=f"{where}.role")
        result.append({"role": str(role), "content": _content(message.get("content"), f"{where}.content")})
    return tuple(result)


def _content(value: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f"{where}[{j}] must be a text part (images and audio are not supported)", param=where
                )
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where} must be a string or a list of text parts", param=where)


# -- responses ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def to_json(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "total_tokens": total}


def new_id(kind: Kind) -> str:
    return ("cmpl-" if kind == "completion" else "chatcmpl-") + uuid.uuid4().hex


def full_response(
    kind: Kind, rid: str, model: str, created: int, text: str, finish: str, usage: Usage
) -> dict[str, Any]:
    """The non-streamed answer."""
    if kind == "completion":
        choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        choice["finish_reason"] = finish
        obj = "chat.completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage.to_json()}


def chunk(
    kind: Kind,
    rid: str,
    model: str,
    created: int,
    text: str | None,
    finish: str | None,
    usage: Usage | None,
    *,
    first: bool = False,
    usage_field: bool = False,
) -> dict[str, Any]:
    """One streamed event. ``text=None`` is the usage-only chunk (no choices) ``include_usage`` asks for."""
    choices: list[dict[str, Any]] = []
    if text is not None:
        if kind == "completion":
            choices.append({"index": 0, "text": text, "logprobs": None, "finish_reason": finish})
        else:
            delta: dict[str, Any] = {"content": text}
            if first:
                delta = {"role": "assistant", **delta}
            choices.append({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish})
    obj = "text_completion" if kind == "completion" else "chat.completion.chunk"
    data: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}
    if usage_field:  # with include_usage, every chunk carries the field (null until the last), as OpenAI's
        data["usage"] = usage.to_json() if usage is not None else None
    return data


def now() -> int:
    return int(time.time())
