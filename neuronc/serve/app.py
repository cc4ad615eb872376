"""The HTTP side: a Starlette application over an ``Engine`` (routes, server-sent events, access log).

Routes: ``GET /health`` (200 once the graphs are loaded: the port only opens then), ``GET /v1/models``
(the one served model, with the bundle key and its compiled limits), ``POST /v1/completions`` and,
where the tokenizer has a chat template, ``POST /v1/chat/completions``. Errors are OpenAI's error
document (``{"error": {"message", "type", "param", "code"}}``): 400 for a bad field or a compiled
limit (naming it), 404 for another model name, 429 with ``Retry-After`` when the queue is full, 503
while shutting down. A request never names a file: prompts are text or token ids.

One access-log line per request, when it ends: client, method, path, status, tokens, time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from neuronc.errors import NeuroncError
from neuronc.serve.chat import ChatTemplate
from neuronc.serve.engine import Engine, Event, Job, QueueFull, ShuttingDown
from neuronc.serve.protocol import (
    GenerationRequest,
    Kind,
    RequestError,
    Usage,
    chunk,
    full_response,
    new_id,
    now,
    parse_body,
    parse_request,
)

ACCESS_LOG = logging.getLogger("neuronc.serve.access")
RETRY_AFTER_SECONDS = 1


@dataclass
class ServeState:
    """What the routes need: the engine, the tokenizer, and what /v1/models says."""

    engine: Engine
    model_name: str
    bundle_key: str
    encode: Callable[[str], list[int]]
    vocab_size: int
    chat: ChatTemplate | None = None
    created: int = field(default_factory=now)

    def model_card(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "neuronc",
            "max_model_len": engine.max_length,
            "bundle_key": self.bundle_key,
            "batch_size": engine.batch_size,
            "context_buckets": engine.context_buckets,
        }


def create_app(state: ServeState) -> ASGIApp:
    async def health(request: Request) -> Response:
        active, waiting = state.engine.load
        return JSONResponse({"status": "ok", "active": active, "waiting": waiting})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [state.model_card()]})

    async def completions(request: Request) -> Response:
        return await _generate(state, request, "completion")

    async def chat(request: Request) -> Response:
        return await _generate(state, request, "chat")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
    if state.chat is not None:
        routes.append(Route("/v1/chat/completions", chat, methods=["POST"]))
    return AccessLog(Starlette(routes=routes))


def _error(exc: RequestError, request: Request, headers: dict[str, str] | None = None) -> Response:
    request.scope.setdefault("neuronc", {})["error"] = exc.message
    return JSONResponse(exc.to_json(), status_code=exc.status, headers=headers)


async def _prompt_ids(state: ServeState, req: GenerationRequest) -> list[int]:
    if req.kind == "chat":
        assert state.chat is not None  # the route exists only with a template
        return await asyncio.to_thread(state.chat.encode, req.messages)  # may wait for transformers to load
    if isinstance(req.prompt, str):
        return state.encode(req.prompt)
    ids = list(req.prompt or ())
    bad = next((t for t in ids if not 0 <= t < state.vocab_size), None)
    if bad is not None:
        raise RequestError(f"token id {bad} is outside the vocabulary [0, {state.vocab_size})", param="prompt")
    return ids


async def _generate(state: ServeState, request: Request, kind: Kind) -> Response:
    info = request.scope.setdefault("neuronc", {})
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()

    def notify(event: Event) -> None:  # from the engine thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    try:
        req = parse_request(parse_body(await request.body()), kind)
        if req.model is not None and req.model != state.model_name:
            msg = f"model {req.model!r} is not served here; this server serves {state.model_name!r}"
            raise RequestError(msg, param="model", status=404)
        prompt_ids = await _prompt_ids(state, req)
        limit_field = "max_tokens" if kind == "completion" else "max_completion_tokens"
        max_tokens = state.engine.check_limits(len(prompt_ids), req.sampling.max_tokens, limit_field)
        job = Job(prompt_ids, req.sampling, max_tokens, req.stream, notify)
        rid, created = new_id(kind), now()
        info.update(id=rid, prompt_tokens=len(prompt_ids))
        state.engine.submit(job)
    except RequestError as exc:
        return _error(exc, request)
    except QueueFull:
        active, waiting = state.engine.load
        msg = f"the server is full: {active} requests in its {state.engine.batch_size} slots, {waiting} waiting"
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return _error(RequestError(msg, status=429), request, headers)
    except ShuttingDown:
        return _error(RequestError("the server is shutting down", status=503), request)
    except NeuroncError as exc:  # the chat template's tokenizer did not load
        return _error(RequestError(exc.message, status=500), request)

    if req.stream:
        body = _stream(state, req, job, events, rid, created, info)
        return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    try:
        event = await _final_event(request, events)
    finally:
        if not job.done:
            state.engine.cancel(job)
    info.update(completion_tokens=event.completion_tokens if event else len(job.tokens), finish=_finish(event))
    _timings(info, job)
    if event is None:  # the client went away
        return Response(status_code=499)
    if event.error is not None:
        return _error(RequestError(f"generation failed: {event.error}", status=500), request)
    usage = Usage(len(job.prompt_ids), event.completion_tokens)
    assert event.finish is not None
    return JSONResponse(full_response(kind, rid, state.model_name, created, event.text, event.finish, usage))


def _finish(event: Event | None) -> str:
    return "disconnected" if event is None else str(event.finish)


def _timings(info: dict[str, Any], job: Job) -> None:
    if job.first_token_at is not None:
        info["ttft_ms"] = round(1000 * (job.first_token_at - job.queued_at), 1)


async def _final_event(request: Request, events: asyncio.Queue[Event]) -> Event | None:
    """The job's last event, or None if the client disconnects first."""

    async def finished() -> Event:
        while True:
            event = await events.get()
            if event.finish is not None:
                return event

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    done_task = asyncio.ensure_future(finished())
    gone_task = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({done_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (done_task, gone_task):
            task.cancel()
    return done_task.result() if done_task.done() and not done_task.cancelled() else None


async def _stream(
    state: ServeState,
    req: GenerationRequest,
    job: Job,
    events: asyncio.Queue[Event],
    rid: str,
    created: int,
    info: dict[str, Any],
) -> AsyncIterator[bytes]:
    """Server-sent events: a chunk per new piece of text, the finish reason, usage if asked, ``[DONE]``."""
    prompt_tokens = len(job.prompt_ids)
    first = True
    finish = "disconnected"
    try:
        while True:
            event = await events.get()
            if event.error is not None:
                finish = "error"
                error = RequestError(f"generation failed: {event.error}", status=500)
                yield _sse(error.to_json())
                break
            usage = Usage(prompt_tokens, event.completion_tokens) if req.continuous_usage else None
            if event.text or event.finish is not None:
                data = chunk(req.kind, rid, state.model_name, created, event.text, event.finish, usage, first=first)
                if req.include_usage or req.continuous_usage:
                    data["usage"] = usage.to_json() if usage is not None else None
                yield _sse(data)
                first = False
            if event.finish is not None:
                finish = event.finish
                if req.include_usage:
                    total = Usage(prompt_tokens, event.completion_tokens)
                    yield _sse(chunk(req.kind, rid, state.model_name, created, None, None, total, usage_field=True))
                break
        yield b"data: [DONE]\n\n"
    finally:
        if not job.done:
            state.engine.cancel(job)
        info.update(completion_tokens=len(job.tokens), finish=finish)
        _timings(info, job)


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class AccessLog:
    """ASGI middleware: one line per HTTP request when its response has ended (or the client left)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            info = scope.get("neuronc", {})
            client = scope.get("client") or ("-", 0)
            fields = [f'{client[0]}:{client[1]} "{scope["method"]} {scope["path"]}" {status[0] or 499}']
            fields += [f"{k}={v}" for k, v in info.items() if k != "error"]
            fields.append(f"ms={1000 * (time.perf_counter() - started):.1f}")
            if "error" in info:
                fields.append(f"error={json.dumps(info['error'])}")
            ACCESS_LOG.info(" ".join(fields))
