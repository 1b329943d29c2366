"""An asyncio stream server that, when it shuts down, closes every connection it accepted.

`asyncio.start_server` and `Server.close` leave two ways to drop a socket unclosed, each a
ResourceWarning in whichever test runs next: a connection accepted just before the close is
still being set up a few loop turns later, and a transport made for a closed server fails in
its constructor (Python 3.11's `Server._attach` asserts); a handler cancelled before its first
step never reaches its own close. `serve` and `shut` avoid both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

# Loop turns from an accepted socket to its handler's first step (accept task, transport,
# handler task), with one to spare.
SETUP_TURNS = 4


class _TrackedStreams(asyncio.StreamReaderProtocol):
    """`asyncio.start_server`'s protocol, keeping each open connection in a shared set."""

    def __init__(self, connections: set[asyncio.BaseTransport], handle: Handler) -> None:
        super().__init__(asyncio.StreamReader(), handle)
        self._connections = connections
        self._connection: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._connection = transport
        self._connections.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._connections.discard(self._connection)
        super().connection_lost(exc)


class StreamServer:
    """`asyncio.start_server`'s server with a shutdown that leaves no socket open."""

    def __init__(self, server: asyncio.Server, connections: set[asyncio.BaseTransport]):
        self.server = server
        self.connections = connections

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def shut(self) -> None:
        """Stop accepting, end every other task on this loop, close every connection."""
        loop = asyncio.get_running_loop()
        for listener in self.server.sockets:
            loop.remove_reader(listener.fileno())
        for _ in range(SETUP_TURNS):
            await asyncio.sleep(0)
        current = asyncio.current_task()
        while pending := [t for t in asyncio.all_tasks() if t is not current]:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for connection in list(self.connections):
            connection.close()
        self.server.close()
        for _ in range(SETUP_TURNS):
            await asyncio.sleep(0)


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    """A handler's last step: close its connection and wait for it, whatever happens meanwhile.

    A shutdown may cancel this wait too; the handler ends either way, and quietly (one that ends
    cancelled is logged by asyncio as an exception in a callback).
    """
    writer.close()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await writer.wait_closed()


async def serve(handle: Handler, host: str, port: int, *, backlog: int = 4096) -> StreamServer:
    """Listen on host:port, calling `handle` for each connection (as `asyncio.start_server`)."""
    connections: set[asyncio.BaseTransport] = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: _TrackedStreams(connections, handle), host, port, backlog=backlog
    )
    return StreamServer(server, connections)
