"""Start, run and stop `neuronc serve`: checks before the port opens, loading, uvicorn, bounded shutdown.

Order (each failure ends the command before anything listens):

1. the bundle has a manifest, and its backend lists `neuronc serve` among its serving stacks
   (``Backend.serving_stacks``: the inductor backend, for CPU bundles): else exit 2 (Neuron bundles are
   served by their own stacks: ``neuronc deploy``);
2. every file's SHA-256 matches the manifest (``verify_bundle``): else exit 4;
3. the backend's runtime loads the bundle (``Backend.runtime.load``, what `neuronc run` does) into a
   ``ServingRunner``; its graphs warm up on the engine's own thread;
4. the socket is bound (``--port 0``: the kernel picks one; the address is printed either way);
5. uvicorn serves the application until SIGTERM or Ctrl-C.

On SIGTERM or Ctrl-C uvicorn stops accepting connections and lets the requests in flight finish for
up to ``shutdown_timeout`` seconds; it then cancels the rest (the engine drops their rows at its next
step). The command then ends with 0 after SIGTERM (a service manager's normal stop) and 130 after
Ctrl-C (the shell's convention), as the issue asks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from neuronc.errors import BundleFormatError, EnvironmentIncompatibleError, InvalidInputError

if TYPE_CHECKING:
    from neuronc.backends.base import Backend
    from neuronc.serve.app import ServeState
    from neuronc.serve.runner import ServingRunner

# Called once the port is open: (state, runner, host, port, whether chat is served).
Announce = Callable[["ServeState", "ServingRunner", str, int, bool], None]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 64
DEFAULT_SHUTDOWN_TIMEOUT = 5.0
# After the grace period, how long the engine thread gets to drop the cancelled rows and end.
_ENGINE_JOIN_SECONDS = 2.0


@dataclass(frozen=True)
class ServeTarget:
    """A bundle that passed the checks: where it is, the backend that built it, its key, and the model
    name it is served under."""

    bundle: Path
    backend: Backend
    bundle_key: str
    model_name: str


def served_name(model_id: str | None, bundle_key: str) -> str:
    """``<model>-<key[:12]>``: the name `neuronc deploy` gives the same bundle's service (ServingValues.name)."""
    base = (model_id or "model").rstrip("/").split("/")[-1].lower()
    safe = "".join(c if c.isalnum() else "-" for c in base).strip("-")[:40] or "model"
    return f"{safe}-{bundle_key[:12]}"


def check_bundle(bundle: Path, *, model_name: str | None = None) -> ServeTarget:
    """Refuse what cannot be served here (exit 2) and what fails verification (exit 4)."""
    from neuronc.backends import backend_for_manifest, is_registered
    from neuronc.bundle import read_manifest, verify_bundle
    from neuronc.spec import ServingStack

    if not bundle.is_dir():
        raise BundleFormatError(f"{bundle}: no such bundle directory")
    if not (bundle / "manifest.json").is_file():
        raise BundleFormatError(
            f"{bundle}: not a bundle (no manifest.json)", hint="pass the directory `neuronc compile` printed"
        )
    manifest = read_manifest(bundle)
    # A bundle read from disk names its backend: resolved here, once; whether `neuronc serve` serves it is
    # the backend's to say (its serving stacks, as for `neuronc deploy --for neuronc`).
    backend = backend_for_manifest(manifest) if is_registered(manifest.backend) else None
    if backend is None or ServingStack.neuronc not in backend.serving_stacks or manifest.target not in backend.targets:
        stacks = [s.value for s in backend.serving_stacks if s is not ServingStack.neuronc] if backend else []
        served_by = f" (served by {', '.join(stacks)})" if stacks else ""
        what = f"a {manifest.backend} bundle for {manifest.target}{served_by}"
        first = stacks[0] if stacks else "vllm"
        hint = f"serve a Neuron bundle with its own stack: neuronc deploy BUNDLE --for {first}"
        raise InvalidInputError(f"{bundle}: {what}; neuronc serve serves CPU (inductor) bundles", hint=hint)
    verify_bundle(bundle).raise_for_problems()
    key = manifest.config_hash
    return ServeTarget(bundle, backend, key, model_name or served_name(manifest.model_id, key))


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (EnvironmentIncompatibleError, exit 5, when the address cannot be had)."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidInputError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise EnvironmentIncompatibleError(
            f"cannot listen on {host}:{port}: {exc.strerror}", hint="pick another --port"
        ) from None
    sock.set_inheritable(True)
    return sock


def _setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    for name, level in (("neuronc.serve", logging.INFO), ("uvicorn", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False


def serve(
    target: ServeTarget,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    max_queue: int = DEFAULT_MAX_QUEUE,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    announce: Announce | None = None,
) -> int:
    """Load the bundle and serve it until SIGTERM (returns 0) or Ctrl-C (raises KeyboardInterrupt: 130)."""
    started = time.perf_counter()
    import uvicorn

    from neuronc.runtime import runnable_backend
    from neuronc.serve.app import ServeState, create_app
    from neuronc.serve.chat import ChatTemplate, has_chat_template
    from neuronc.serve.engine import Engine

    backend = runnable_backend(target.bundle)  # exit 5 if it cannot run here (no torch: the cpu extra)
    # Warmed up by the engine's own thread (Engine.start), not by the loader.
    runner: ServingRunner = backend.runtime.load(target.bundle, warmup=False)
    if not runner.has_tokenizer:
        raise BundleFormatError(f"{target.bundle}: the bundle has no tokenizer; neuronc serve needs one")
    runner.tokenizer  # noqa: B018  (loaded now, not by the first request)
    engine = Engine(runner, max_queue=max_queue)
    engine.start()
    runner.load_seconds = time.perf_counter() - started
    # After the graphs: its transformers import (seconds) runs in the background (chat.ChatTemplate).
    chat = ChatTemplate(runner.model_dir) if has_chat_template(runner.model_dir) else None
    state = ServeState(engine, target.model_name, target.bundle_key, runner.encode, runner.vocab_size, chat)
    sock = bind(host, port)
    bound = sock.getsockname()
    _setup_logging()
    config = uvicorn.Config(
        create_app(state),
        log_config=None,
        access_log=False,  # the application writes its own line per request (app.AccessLog)
        lifespan="off",
        timeout_graceful_shutdown=max(0, round(shutdown_timeout)),
    )
    server = uvicorn.Server(config)
    if announce is not None:
        announce(state, runner, bound[0], bound[1], chat is not None)
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    # uvicorn takes SIGINT/SIGTERM while it serves and, once stopped, raises the one it got again
    # for the handler that was there before: this recorder, so the exit code is decided here.
    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        if not engine.close(_ENGINE_JOIN_SECONDS):
            engine.abort()
            engine.close(_ENGINE_JOIN_SECONDS)
    if signal.SIGINT in received:
        raise KeyboardInterrupt
    return 0


# What `neuronc run` sets before torch loads, for the same reasons (neuronc/cli/run.py): the backend's
# runtime environment (inductor's torch need not probe the CPU's ISA by compiling test programs), and
# OpenMP threads wait at a barrier sleeping, not spinning (a demo decode step 0.17 ms instead of 0.8-12 ms on a busy
# 2-core host). A value the user set wins.
_OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def apply_environment(backend: Backend) -> None:
    """What this process sets before the backend's runtime loads (``Backend.runtime.process_env``), and
    passive OpenMP waits; a value the user set wins."""
    for name, value in {**backend.runtime.process_env, **_OPENMP_ENV}.items():
        os.environ.setdefault(name, value)
