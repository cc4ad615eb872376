"""`neuronc serve BUNDLE`: an OpenAI-compatible HTTP server for a CPU bundle (neuronc.serve)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.errors import MISSING_LIBRARY

if TYPE_CHECKING:
    from neuronc.serve.app import ServeState
    from neuronc.serve.runner import ServingRunner

BundleArg = Annotated[
    Path, cli.Argument(help="CPU bundle directory (as printed by `neuronc compile`).", show_default=False)
]
HostOpt = Annotated[str, cli.Option("--host", help="Address to listen on (0.0.0.0: every interface).")]
PortOpt = Annotated[int, cli.Option("--port", min=0, max=65535, help="TCP port (0: any free port, printed).")]
MaxQueueOpt = Annotated[
    int, cli.Option("--max-queue", min=0, help="Requests that may wait for a batch slot; beyond, 429 + Retry-After.")
]
ModelNameOpt = Annotated[
    str | None,
    cli.Option(
        "--served-model-name",
        help="Model id in /v1/models and requests (default: <model>-<key[:12]>).",
        show_default=False,
    ),
]
ShutdownOpt = Annotated[
    float,
    cli.Option("--shutdown-timeout", min=0.0, help="Seconds in-flight requests get to finish on SIGTERM/Ctrl-C."),
]

_EPILOG = (
    "Example: neuronc serve ./demo --port 8000 & curl -s localhost:8000/v1/completions "
    '-d \'{"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}\''
)


@command(name="serve", epilog=_EPILOG)
def serve_command(
    bundle: BundleArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    max_queue: MaxQueueOpt = 64,
    served_model_name: ModelNameOpt = None,
    shutdown_timeout: ShutdownOpt = 5.0,
) -> int:
    """Serve a CPU bundle over HTTP (OpenAI completions and chat), batched over its compiled shapes.

    Exits 2 for a bundle that is not a CPU bundle, 4 for one that fails verification (both before the
    port opens), 0 after SIGTERM and 130 after Ctrl-C.
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        doing = "neuronc serve needs the serve extra (uvicorn, starlette)"
        raise MISSING_LIBRARY.convert(exc, doing, hint="pip install 'neuronc[cpu,serve]'") from None
    from neuronc.serve.server import apply_environment, check_bundle, serve

    target = check_bundle(bundle, model_name=served_model_name)
    apply_environment(target.backend)  # before the backend's runtime is imported
    return serve(
        target, host=host, port=port, max_queue=max_queue, shutdown_timeout=shutdown_timeout, announce=_announce
    )


def _announce(state: ServeState, runner: ServingRunner, host: str, port: int, chat: bool) -> None:
    shown = f"[{host}]" if ":" in host else host
    routes = "/v1/completions, /v1/chat/completions" if chat else "/v1/completions"
    sys.stderr.write(
        f"neuronc serve: {state.model_name} (bundle {state.bundle_key[:12]}) on http://{shown}:{port}"
        f" · batch {runner.batch_size}, context buckets {runner.context_buckets}, max_length {runner.max_length}"
        f" · loaded in {runner.load_seconds:.2f} s · {routes}\n"
    )
    sys.stderr.flush()
