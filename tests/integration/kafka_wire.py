"""A Kafka-protocol TCP proxy that notes each request a client sends and when its answer comes
back: what a client does on the wire, seen from outside its process. A broker behind it
advertises the proxy's address, so that clients come back through it after the bootstrap
(``EmbeddedBroker(advertised=...)``)."""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
import time
from dataclasses import dataclass

from banditflow.streams.broker import free_port

FETCH, PRODUCE = 1, 0  # Kafka API keys


@dataclass
class Exchange:
    """A request as it went to the broker, and when (``time.monotonic()``) it went and its
    answer came back (None: not yet)."""

    connection: int
    api_key: int
    request: bytes  # the frame, without its length
    sent: float
    answered: float | None = None

    def names(self, topic: str) -> bool:
        """Whether the request names ``topic`` (a topic name is written out in full)."""
        return topic.encode() in self.request


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next length-prefixed frame; None at the end of the stream."""
    try:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class WireLog:
    """Forwards ``127.0.0.1:port`` to ``upstream`` (host, port) on a thread of its own, for as
    long as the context is open, noting every request in :attr:`exchanges`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.exchanges: list[Exchange] = []
        self._connections = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> WireLog:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def since(self, start: float) -> list[Exchange]:
        """The requests sent from ``start`` on (``time.monotonic()``)."""
        return [e for e in list(self.exchanges) if e.sent >= start]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        connection = next(self._connections)
        try:
            broker, to_broker = await asyncio.open_connection(*self.upstream)
        except OSError:  # (the broker is not up yet: the client connects again)
            to_client.close()
            return
        in_flight: dict[int, Exchange] = {}

        async def requests() -> None:
            while (frame := await read_frame(client)) is not None:
                api_key, _, correlation = struct.unpack_from(">hhi", frame)
                exchange = Exchange(connection, api_key, frame, time.monotonic())
                in_flight[correlation] = exchange
                self.exchanges.append(exchange)
                to_broker.write(struct.pack(">i", len(frame)) + frame)
                await to_broker.drain()
            to_broker.close()

        async def answers() -> None:
            while (frame := await read_frame(broker)) is not None:
                (correlation,) = struct.unpack_from(">i", frame)
                if (exchange := in_flight.pop(correlation, None)) is not None:
                    exchange.answered = time.monotonic()
                to_client.write(struct.pack(">i", len(frame)) + frame)
                await to_client.drain()
            to_client.close()

        await asyncio.gather(requests(), answers(), return_exceptions=True)
