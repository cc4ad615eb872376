"""The container runtime (docker or podman, the CLI they share is all neuronc uses), for any backend
that compiles in an image and for the pre-boot verdict that reads one.

The runtime is found on PATH (or named by ``NEURONC_CONTAINER_RUNTIME``). An image is run by digest
only: a tag is resolved to ``repository@sha256:...`` with ``<runtime> image inspect`` and that
reference is what runs and what a manifest records. An image that is not on this machine is pulled
only when the user allows it (``NEURONC_PULL_IMAGES=1``); otherwise exit 5 with the ``pull`` command
to run. Every command ends its options with ``--`` before an image reference, and one that should
answer at once and does not within ``NEURONC_CONTAINER_TIMEOUT`` seconds is exit 5, naming the engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from neuronc.errors import BackendUnavailableError, EnvironmentIncompatibleError, InvalidInputError

RUNTIME_ENV = "NEURONC_CONTAINER_RUNTIME"
PULL_ENV = "NEURONC_PULL_IMAGES"
RUNTIMES = ("docker", "podman")
TIMEOUT_ENV = "NEURONC_CONTAINER_TIMEOUT"
_INSPECT_TIMEOUT_S = 120


def container_timeout(default: float, environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for a container-engine command that should answer promptly (``image inspect``, a
    probe's ``run``): ``NEURONC_CONTAINER_TIMEOUT``, else ``default``."""
    env = os.environ if environ is None else environ
    raw = env.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise InvalidInputError(f"{TIMEOUT_ENV}={raw[:40]!r}: not a number of seconds (0 < s <= 86400)")
    return value


def engine_silent(runtime: Runtime, what: str, seconds: float) -> BackendUnavailableError:
    """Exit 5: the container engine did not answer ``what`` within ``seconds``."""
    msg = f"{runtime.kind} ({runtime.executable}) did not answer `{runtime.kind} {what}` within {seconds:g} s"
    hint = f"is the {runtime.kind} engine running? (`{runtime.kind} info`); {TIMEOUT_ENV}=SECONDS sets the limit"
    return BackendUnavailableError(msg, hint=hint)


@dataclass(frozen=True)
class Runtime:
    """A container runtime: ``docker`` or ``podman`` (the CLI they share is all neuronc uses)."""

    kind: str
    executable: str


def find_runtime(environ: Mapping[str, str] | None = None, prefer: str | None = None) -> Runtime | None:
    """The container runtime to use: ``NEURONC_CONTAINER_RUNTIME``, else docker, else podman on PATH."""
    env = os.environ if environ is None else environ
    named = env.get(RUNTIME_ENV)
    if named:
        path = shutil.which(named, path=env.get("PATH"))
        if path is None:
            return None
        base = Path(path).name
        return Runtime(next((k for k in RUNTIMES if k in base), "docker"), path)
    for kind in (prefer,) if prefer else RUNTIMES:
        path = shutil.which(kind, path=env.get("PATH")) if kind else None
        if path is not None:
            return Runtime(kind, path)
    return None


def pull_allowed(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(PULL_ENV, "").strip().lower() in ("1", "true", "yes")


def repository_of(reference: str) -> str:
    """``repo`` of ``repo:tag`` or ``repo@sha256:...`` (a registry port's colon is kept)."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


# How docker ("No such image") and podman ("image not known") say an image is absent.
_ABSENT = ("no such image", "no such object", "image not known")


def _inspect_digests(runtime: Runtime, reference: str, env: Mapping[str, str]) -> list[str] | None:
    """The image's repository digests, or None when the image is not on this machine.

    BackendUnavailableError when the runtime cannot answer at all (no engine behind the client).
    """
    # "--" ends the options: a reference is never read as one.
    cmd = [runtime.executable, "image", "inspect", "--format", "{{json .RepoDigests}}", "--", reference]
    limit = container_timeout(_INSPECT_TIMEOUT_S, env)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(env), timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        raise engine_silent(runtime, "image inspect", limit) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        if any(word in said.lower() for word in _ABSENT):
            return None
        msg = f"{runtime.kind} could not inspect {reference}: {said.splitlines()[-1] if said else 'no output'}"
        raise BackendUnavailableError(msg, hint=f"is the {runtime.kind} engine running? (`{runtime.kind} info`)")
    try:
        digests = json.loads(done.stdout.strip() or "[]")
    except ValueError:
        return None
    return [d for d in digests if isinstance(d, str)] if isinstance(digests, list) else None


def pinned_image(runtime: Runtime, reference: str, *, allow_pull: bool, log: Path, env: Mapping[str, str]) -> str:
    """``repository@sha256:...`` for ``reference`` (a tag or a digest reference), pulling it if allowed."""
    digests = _inspect_digests(runtime, reference, env)
    if digests is None:
        if not allow_pull:
            msg = f"the image {reference} is not on this machine"
            hint = f"`{runtime.kind} pull {reference}`, or set {PULL_ENV}=1 to let neuronc pull it"
            raise BackendUnavailableError(msg, hint=hint)
        with log.open("ab") as out:
            out.write(f"$ {runtime.kind} pull {reference}\n".encode())
            out.flush()
            pulled = subprocess.run(
                [runtime.executable, "pull", "--", reference],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                check=False,
            )
        if pulled.returncode != 0:
            raise BackendUnavailableError(f"{runtime.kind} pull {reference} failed", hint=f"see {log}")
        digests = _inspect_digests(runtime, reference, env) or []
    repository = repository_of(reference)
    wanted = reference.split("@", 1)[1] if "@" in reference else None
    for digest in digests:
        if repository_of(digest) == repository and (wanted is None or digest.endswith("@" + wanted)):
            return digest
    msg = f"{reference}: the runtime reports no {repository} digest for it ({', '.join(digests) or 'none'})"
    raise EnvironmentIncompatibleError(msg, hint="pull the image from its registry (a locally built image has none)")


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str
    read_only: bool = False

    def flag(self) -> str:
        return f"{self.host}:{self.container}{':ro' if self.read_only else ''}"


def container_argv(
    runtime: Runtime,
    image: str,
    command: Sequence[str],
    *,
    mounts: Sequence[Mount],
    env: Mapping[str, str],
    name: str,
    workdir: str,
    tp_degree: int = 1,
) -> list[str]:
    """``<runtime> run`` for one compile: no network (everything it reads is mounted), files written as
    this user (docker ``--user``, podman ``--userns keep-id``), removed when it ends, with shared memory
    for tensor-parallel work (``shm_size``). The image's own entrypoint stays: the DLC's runs its
    arguments as a command."""
    argv = [runtime.executable, "run", "--rm", "--name", name, "--network", "none", "--workdir", workdir]
    argv += ["--shm-size", shm_size(tp_degree)]
    if runtime.kind == "podman":
        argv += ["--userns", "keep-id"]
    else:
        argv += ["--user", f"{os.getuid()}:{os.getgid()}"]
    for mount in mounts:
        argv += ["--volume", mount.flag()]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    return [*argv, "--", image, *command]


# vLLM's Docker docs (docs/deployment/docker.md) ask for ``--ipc=host`` or ``--shm-size``: PyTorch shares
# data between processes through shared memory, in particular for tensor-parallel inference. They give
# no size: neuronc gives each tensor-parallel rank 1 GiB, at least 2 GiB (docker's default is 64 MiB).
SHM_GIB_PER_RANK = 1
SHM_MIN_GIB = 2


def shm_size(tp_degree: int) -> str:
    """``--shm-size`` for a compile of ``tp_degree`` ranks (a private /dev/shm; never ``--ipc=host``)."""
    return f"{max(SHM_MIN_GIB, SHM_GIB_PER_RANK * max(1, tp_degree))}g"


def remove_container(runtime: Runtime, name: str, env: Mapping[str, str]) -> None:
    """Best effort: the container of an interrupted compile (killing the client does not stop it)."""
    subprocess.run([runtime.executable, "rm", "-f", name], capture_output=True, env=dict(env), timeout=60, check=False)


__all__ = [
    "PULL_ENV",
    "RUNTIMES",
    "RUNTIME_ENV",
    "TIMEOUT_ENV",
    "Mount",
    "Runtime",
    "container_argv",
    "container_timeout",
    "engine_silent",
    "find_runtime",
    "pinned_image",
    "pull_allowed",
    "remove_container",
    "repository_of",
    "shm_size",
]
