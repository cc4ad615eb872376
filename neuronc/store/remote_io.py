"""Every remote call of a remote store: bounded in time, cancellable with Ctrl-C, errors mapped once.

Time limits, all set by environment variables (docs/remote-store.md):

- ``NEURONC_REMOTE_CONNECT_TIMEOUT`` (5 s) and ``NEURONC_REMOTE_READ_TIMEOUT`` (8 s): one HTTP
  attempt's TCP connect, and its wait for any byte of an answer (botocore's ``connect_timeout`` and
  ``read_timeout``).
- ``NEURONC_REMOTE_RETRIES`` (2): attempts after the first, with botocore's "standard" exponential
  backoff and jitter. s3fs's own retry loop is turned off so that retries do not multiply.
- ``NEURONC_REMOTE_DEADLINE`` (20 s): one remote call (a listing, a manifest read, one object's
  upload or download) with all its retries may take no longer; an object transfer gets one more
  second per ``NEURONC_REMOTE_MIN_RATE`` bytes (1 MiB) of its size.

A server that accepts TCP and never answers therefore fails the first call after the deadline
(about 20 s by default) instead of after botocore's and s3fs's nested retries (about 7 minutes).

Calls run as coroutines on the file system's event loop (s3fs is asynchronous; a synchronous file
system such as the Hub's runs in worker threads of that loop). The calling thread waits for them in
a way Ctrl-C interrupts; the KeyboardInterrupt then cancels every coroutine still running or queued
(s3fs aborts a multipart upload it is cancelled in) and propagates after a bounded wait.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from neuronc.errors import (
    MISSING_LIBRARY,
    NETWORK,
    InvalidInputError,
    NeuroncError,
    RemoteStoreError,
    foreign_row,
    from_foreign,
)
from neuronc.store.remote_url import StoreURL

T = TypeVar("T")
MiB = 1024 * 1024
IO_CONCURRENCY = 8
# After Ctrl-C, how long cancelled transfers may take to unwind (s3fs aborts multipart uploads).
CANCEL_GRACE_SECONDS = 3.0

_SETTINGS = (
    # (field, environment variable, default, minimum)
    ("connect_timeout", "NEURONC_REMOTE_CONNECT_TIMEOUT", 5.0, 0.1),
    ("read_timeout", "NEURONC_REMOTE_READ_TIMEOUT", 8.0, 0.1),
    ("retries", "NEURONC_REMOTE_RETRIES", 2.0, 0.0),
    ("deadline", "NEURONC_REMOTE_DEADLINE", 20.0, 0.1),
    ("min_rate", "NEURONC_REMOTE_MIN_RATE", float(MiB), 1.0),
)


class FsOp(StrEnum):
    """The fsspec file-system methods a remote store calls (``RemoteIO.op``; async ones get a ``_``)."""

    CAT_FILE = "cat_file"
    INFO = "info"
    LS = "ls"
    PIPE_FILE = "pipe_file"
    PUT_FILE = "put_file"
    RM_FILE = "rm_file"
    FIND = "find"


@dataclass(frozen=True)
class RemoteSettings:
    """Time limits for remote calls (see the module docstring)."""

    connect_timeout: float = 5.0
    read_timeout: float = 8.0
    retries: int = 2
    deadline: float = 20.0
    min_rate: float = float(MiB)  # bytes per second an object transfer must average

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RemoteSettings:
        """The settings from ``NEURONC_REMOTE_*`` variables; a bad value is exit 2 naming the variable."""
        env = os.environ if environ is None else environ
        values: dict[str, float] = {}
        for name, var, default, minimum in _SETTINGS:
            text = env.get(var, "").strip()
            try:
                value = float(text) if text else default
            except ValueError:
                value = float("nan")
            if not value >= minimum or value == float("inf"):
                msg = f"{var}={text!r}: expected a number >= {minimum:g}"
                raise InvalidInputError(msg, hint=f"unset {var} for the default ({default:g})")
            values[name] = value
        return cls(
            connect_timeout=values["connect_timeout"],
            read_timeout=values["read_timeout"],
            retries=int(values["retries"]),
            deadline=values["deadline"],
            min_rate=values["min_rate"],
        )

    def budget(self, size: int = 0) -> float:
        """Seconds one call may take: the deadline, plus time to move ``size`` bytes at ``min_rate``."""
        return self.deadline + size / self.min_rate

    def s3_options(self) -> dict[str, Any]:
        """s3fs arguments: botocore's timeouts and retries (s3fs's own loop is turned off in ``RemoteIO``)."""
        return {
            "config_kwargs": {
                "connect_timeout": self.connect_timeout,
                "read_timeout": self.read_timeout,
                "retries": {"max_attempts": self.retries + 1, "mode": "standard"},
            },
        }


class RemoteIO:
    """The file system of one remote store, and the one way its calls are made."""

    def __init__(
        self,
        url: StoreURL,
        *,
        fs: Any = None,
        storage_options: Mapping[str, Any] | None = None,
        settings: RemoteSettings | None = None,
    ) -> None:
        self.url = url
        self.settings = settings or RemoteSettings.from_env()
        self._storage_options = dict(storage_options or {})
        self._fs = fs

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = self._make_fs()
        return self._fs

    def _make_fs(self) -> Any:
        if self.url.scheme == "s3":
            try:
                import s3fs
            except ImportError as exc:
                raise MISSING_LIBRARY.convert(
                    exc, "s3:// stores need s3fs", hint="pip install 'neuronc[remote]'"
                ) from None
            options = {
                "skip_instance_cache": True,
                "use_listings_cache": False,
                **self.settings.s3_options(),
                **self._storage_options,
            }
            fs = s3fs.S3FileSystem(**options)
            fs.retries = 1  # one attempt per s3fs call: botocore retries (a class attribute, not an argument)
            return fs
        from huggingface_hub import HfFileSystem

        return HfFileSystem(skip_instance_cache=True, **self._storage_options)

    @property
    def is_async(self) -> bool:
        return bool(getattr(self.fs, "async_impl", False))

    def path(self, rel: str) -> str:
        """A path inside the store as the file system names it."""
        return f"{self.url.fs_root}/{rel}" if rel else self.url.fs_root

    def invalidate(self) -> None:
        """Forget listings the file system cached (other publishers may have written since); no I/O."""
        self.fs.invalidate_cache()

    # -- one call -------------------------------------------------------------------------------
    async def op(self, method: FsOp, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """``fs.<method>(*args)`` as a coroutine; None for a missing path when ``missing_ok``."""
        try:
            if self.is_async:
                return await getattr(self.fs, f"_{method}")(*args, **kwargs)
            return await asyncio.to_thread(getattr(self.fs, method), *args, **kwargs)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise

    def call(self, what: str, method: FsOp, *args: Any, size: int = 0, missing_ok: bool = False, **kwargs: Any) -> Any:
        """One remote call, within the deadline (plus transfer time for ``size`` bytes)."""
        return self.run(what, lambda: self.op(method, *args, missing_ok=missing_ok, **kwargs), size=size)

    def run(self, what: str, factory: Callable[[], Awaitable[T]], *, size: int = 0) -> T:
        """Run a coroutine on the file system's loop within ``budget(size)``; map its errors."""
        budget = self.settings.budget(size)

        async def bounded() -> T:
            return await asyncio.wait_for(factory(), budget)

        return self._wait(what, bounded, budget)

    def run_all(self, what: str, factories: Sequence[tuple[int, Callable[[], Awaitable[T]]]]) -> list[T]:
        """Run ``(size, coroutine factory)`` pairs, ``IO_CONCURRENCY`` at a time, each within its budget.

        The first failure cancels the rest; Ctrl-C cancels all of them, running and queued.
        """
        limit = asyncio.Semaphore(IO_CONCURRENCY)
        settings = self.settings

        async def one(size: int, factory: Callable[[], Awaitable[T]]) -> T:
            async with limit:
                return await asyncio.wait_for(factory(), settings.budget(size))

        async def everything() -> list[T]:
            tasks = [asyncio.ensure_future(one(size, factory)) for size, factory in factories]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        return self._wait(what, everything, settings.budget(sum(size for size, _ in factories)))

    def _wait(self, what: str, factory: Callable[[], Awaitable[T]], budget: float) -> T:
        finished = threading.Event()

        async def tracked() -> T:
            try:
                return await factory()
            finally:
                finished.set()

        loop = self.fs.loop if self.is_async else _shared_loop()
        future: Future[T] = asyncio.run_coroutine_threadsafe(tracked(), loop)
        try:
            return future.result()  # Ctrl-C interrupts this wait in the main thread
        except KeyboardInterrupt:
            future.cancel()
            finished.wait(CANCEL_GRACE_SECONDS)
            raise
        except NeuroncError:
            raise
        except Exception as exc:
            timed_out = f"{what} timed out after {budget:.0f} s" if isinstance(exc, TimeoutError) else None
            error = self.storage_error(what, exc, doing=timed_out)
            if error is None:
                raise
            raise error from exc

    def storage_error(self, what: str, exc: BaseException, *, doing: str | None = None) -> NeuroncError | None:
        """The RemoteStoreError (exit 5) for a failed call (the table's error where it names another:
        a full disk), or None when ``exc`` is not a storage failure."""
        row = foreign_row(exc)
        if row is None:
            return None
        hint = _timeout_hint() if row is NETWORK else self.url.access_hint()
        return from_foreign(exc, f"{self.url.url}: {doing or what + ' failed'}", error=RemoteStoreError, hint=hint)


def _shared_loop() -> asyncio.AbstractEventLoop:
    """fsspec's background event loop (for synchronous file systems, whose calls run in its threads)."""
    from fsspec.asyn import get_loop

    loop: asyncio.AbstractEventLoop = get_loop()
    return loop


def _timeout_hint() -> str:
    return (
        "check the endpoint is up and reachable; the limits are NEURONC_REMOTE_CONNECT_TIMEOUT, "
        "NEURONC_REMOTE_READ_TIMEOUT, NEURONC_REMOTE_RETRIES and NEURONC_REMOTE_DEADLINE (seconds)"
    )


def error_codes(exc: BaseException) -> set[str]:
    """Every S3 error code, HTTP status and message in an exception's chain."""
    codes: set[str] = set()
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, Mapping):
            error = response.get("Error") or {}
            codes.add(str(error.get("Code", "")))
            meta = response.get("ResponseMetadata") or {}
            codes.add(str(meta.get("HTTPStatusCode", "")))
        codes.add(str(seen))
        seen = seen.__cause__ or seen.__context__
    return codes


def precondition_failed(exc: BaseException) -> bool:
    """A conditional write (If-None-Match) lost: the object is already there."""
    if isinstance(exc, FileExistsError):
        return True
    text = " ".join(error_codes(exc))
    return any(word in text for word in ("PreconditionFailed", "412", "pre-condition", "ConditionalRequestConflict"))


def unsupported(exc: BaseException) -> bool:
    """The server or file system does not implement conditional writes."""
    if isinstance(exc, NotImplementedError | TypeError):
        return True
    text = " ".join(error_codes(exc))
    return any(word in text for word in ("NotImplemented", "501", "not implemented"))


__all__ = [
    "IO_CONCURRENCY",
    "RemoteIO",
    "RemoteSettings",
    "error_codes",
    "precondition_failed",
    "unsupported",
]
