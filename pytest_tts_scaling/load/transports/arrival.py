"""A plain TCP connection whose reads carry the kernel's arrival time.

A timestamp taken when the event loop reads a socket is late by however long the loop was busy
elsewhere: at hundreds of streams, whose answers arrive in bursts, that lateness is the client's
TTFAB error. Linux stamps each packet as it arrives (`SO_TIMESTAMPNS`) and gives `recvmsg` the
stamp of the newest bytes a read returns; this connection reads with it, so a piece the loop
reads late is still timed when it reached the host. The stamp is the piece's own only when the
loop read it before the next one arrived: TCP merges segments waiting in the socket and keeps the
newest stamp, so then it is late by the gap between them, and never later than the read. Where
the kernel gives no stamp (another system), a read is timed when it happens, as asyncio's own
transports are.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

# Linux's number for the option; Python's socket module does not name it.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
# As much as asyncio's transports read at once, into one buffer per thread (per event loop): a
# connection's protocol is done with the bytes when its call returns, and a buffer each would
# hold 256 KiB per connection until a full collection, which rungs hold back.
READ_BYTES = 256 * 1024
_read_buffers = threading.local()


def _read_buffer() -> bytearray:
    buffer: bytearray | None = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = bytearray(READ_BYTES)
    return buffer


class ArrivalProtocol(Protocol):
    """What the connection reports to: asyncio's protocol callbacks, with the data's arrival."""

    def connection_made(self, transport: StampedConnection) -> None: ...

    def data_arrived(self, data: memoryview, at_ns: int, kernel_stamped: bool) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


P = TypeVar("P", bound=ArrivalProtocol)


def arrival_ns(
    ancillary: Iterable[tuple[int, int, bytes]], read_ns: int, read_wall_ns: int
) -> int | None:
    """When a read's bytes arrived, on the monotonic clock: the read's time less how long the
    kernel held them (its stamp is on the wall clock, read at the same moment as `read_ns`).

    None without a stamp; the read's time where the wall clock has since stepped back past it.
    """
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            held_ns = read_wall_ns - (seconds * 1_000_000_000 + nanoseconds)
            return read_ns - max(0, held_ns)
    return None


async def open_stamped(
    host: str, port: int, protocol_factory: Callable[[], P]
) -> tuple[StampedConnection, P]:
    """Connect to the first of `host`'s addresses that answers, as `loop.create_connection`
    (which, like this, resolves a numeric address without the thread pool)."""
    loop = asyncio.get_running_loop()
    try:
        addresses = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except socket.gaierror:
        addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    refused: OSError | None = None
    for family, kind, proto, _name, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            refused = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = protocol_factory()
        return StampedConnection(loop, sock, protocol), protocol
    raise refused or OSError(f"{host}:{port} resolves to no address")


class StampedConnection:
    """The transport side its protocol sees (`write`, `close`), reading with arrival stamps."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: ArrivalProtocol
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._buffer = _read_buffer()
        self._unsent = bytearray()
        self._closed = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        try:
            size, ancillary, _flags, _address = self._sock.recvmsg_into(
                [self._buffer], _STAMP_SPACE
            )
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        read_ns, read_wall_ns = time.perf_counter_ns(), time.time_ns()
        if size == 0:
            self._loop.remove_reader(self._fd)
            self._protocol.eof_received()
            self._lose(None)
            return
        at_ns = arrival_ns(ancillary, read_ns, read_wall_ns)
        self._protocol.data_arrived(
            memoryview(self._buffer)[:size],
            read_ns if at_ns is None else at_ns,
            kernel_stamped=at_ns is not None,
        )

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        if not self._unsent:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                # As asyncio's transports do: the protocol hears of it from the loop, not
                # inside its own call.
                self._loop.call_soon(self._lose, exc)
                return
            data = data[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._write_ready)
        self._unsent += data

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._unsent[:sent]
        if not self._unsent:
            self._loop.remove_writer(self._fd)

    def close(self) -> None:
        if not self._closed:
            self._release()
            self._loop.call_soon(self._protocol.connection_lost, None)

    def _lose(self, exc: Exception | None) -> None:
        if not self._closed:
            self._release()
            self._protocol.connection_lost(exc)

    def _release(self) -> None:
        self._closed = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()
