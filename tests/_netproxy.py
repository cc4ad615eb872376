"""TCP stand-ins for a bad network, on 127.0.0.1 only: a black hole and a throttling proxy.

``BlackHole`` accepts connections and never answers (an endpoint that is up at the TCP level and
dead above it). ``ThrottlingProxy`` forwards to a real server (SeaweedFS) at a limited rate in each
direction and counts the bytes sent upstream, so that a test can act while an upload is under way.
Both run an asyncio loop in a daemon thread; ``stop()`` closes every connection and joins it with a
bounded wait. Written by hand because no maintained library offers a rate-limited TCP proxy that can
be started inside a test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable

STOP_WAIT_SECONDS = 5.0
_PIECE = 16 * 1024


class _LoopThread:
    """An asyncio server in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=type(self).__name__)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    def _serve(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self._thread.start()

        async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.add(writer)
            try:
                await handler(reader, writer)
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                self._writers.discard(writer)
                writer.close()

        async def start() -> int:
            self._server = await asyncio.start_server(tracked, "127.0.0.1", 0)
            return int(self._server.sockets[0].getsockname()[1])

        self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=STOP_WAIT_SECONDS)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(TimeoutError):
                asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=STOP_WAIT_SECONDS)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=STOP_WAIT_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


class BlackHole(_LoopThread):
    """Accepts TCP connections, reads and discards what arrives, never answers."""

    def __init__(self) -> None:
        super().__init__()
        self.connections = 0
        self._serve(self._swallow)

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while await reader.read(65536):
            pass


class ThrottlingProxy(_LoopThread):
    """Forwards 127.0.0.1:port to ``target`` at ``rate`` bytes per second each way; counts upstream bytes."""

    def __init__(self, target_port: int, rate: float) -> None:
        super().__init__()
        self.target_port = target_port
        self.rate = rate
        self.bytes_up = 0
        self._serve(self._forward)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.add(up_writer)
        try:
            await asyncio.gather(self._pipe(reader, up_writer, count=True), self._pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, count: bool = False) -> None:
        try:
            while piece := await source.read(_PIECE):
                started = time.monotonic()
                sink.write(piece)
                await sink.drain()
                if count:
                    self.bytes_up += len(piece)
                await asyncio.sleep(max(0.0, len(piece) / self.rate - (time.monotonic() - started)))
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                sink.write_eof()


__all__ = ["BlackHole", "ThrottlingProxy"]
