"""A small real HTTP/1.1 server that misbehaves on purpose, for the load engine's fault tests.

Each fault is one argument: answer every request with one status, drop every k-th answer after
its headers, stall after M requests, gate beyond K in flight with the container's 503 body, or
put a WAV header (written in pieces, with a LIST chunk) before the audio. It can also stop
listening mid-run. Runs on its own event loop in a thread on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import threading
import time
from dataclasses import dataclass, field

PCM_BYTES_PER_S = 48000


def riff_header(*, rate: int = 24000, extra: bytes = b"", data_size: int = 0xFFFFFFFF) -> bytes:
    """A RIFF/WAVE header with `extra` chunks between `fmt ` and `data` (the container's
    `tts_container.audio.wav_header` writes none)."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + extra
        + b"data"
        + struct.pack("<I", data_size)
    )


def list_chunk(text: bytes = b"INFOISFT\x05\x00\x00\x00test\x00") -> bytes:
    """A LIST chunk as encoders write it (odd sizes are padded to a word)."""
    return b"LIST" + struct.pack("<I", len(text)) + text + (b"\x00" if len(text) % 2 else b"")


@dataclass
class FaultServer:
    first_audio_s: float = 0.02
    service_s: float = 0.05
    chunks: int = 2
    status: int = 200  # every answer has this status; not 200 means a JSON error body
    drop_every: int | None = None  # every k-th answer: headers, then the connection closes
    stall_after: int | None = None  # requests beyond the first M: headers, then nothing
    gate: int | None = None  # beyond this many in flight, 503 with the container's body
    wav_pieces: list[bytes] | None = None  # written right after the headers, one write each
    host: str = "127.0.0.1"
    port: int = 0
    served: int = 0
    first_audio_sent_ns: dict[str, int] = field(default_factory=dict)
    _in_flight: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _thread: threading.Thread | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FaultServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port, backlog=1024)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_listening()
        loop = self._loop
        if loop is None:
            return

        async def cancel_handlers() -> None:
            await asyncio.sleep(0.05)  # handlers of connections just accepted start first
            for writer in list(self._writers):
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0.05)  # closed transports release their sockets

        asyncio.run_coroutine_threadsafe(cancel_handlers(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    def stop_listening(self) -> None:
        """The server dies: the port refuses connections and open ones are closed."""
        loop, server = self._loop, self._server
        if loop is None or server is None or not server.is_serving():
            return

        async def close() -> None:
            server.close()
            for writer in list(self._writers):
                writer.close()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                await reader.readexactly(int(headers.get("content-length", "0")))
                self.served += 1
                if not await self._answer(writer, self.served, headers.get("x-request-id", "")):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, writer: asyncio.StreamWriter, index: int, request_id: str) -> bool:
        """One answer; False when the connection is to be closed."""
        if self.status != 200:
            await self._error(writer, self.status, {"error": "internal_error"})
            return True
        if self.gate is not None and self._in_flight >= self.gate:
            body = {"error": "queue_saturated", "queue_depth": self._in_flight}
            await self._error(writer, 503, {**body, "max_queue_depth": self.gate})
            return True
        self._in_flight += 1
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: audio/pcm\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            if self.drop_every is not None and index % self.drop_every == 0:
                return False
            if self.stall_after is not None and index > self.stall_after:
                await asyncio.sleep(3600)
            for piece in self.wav_pieces or []:
                await self._chunk(writer, piece)
                await asyncio.sleep(0.01)
            await self._audio(writer, request_id)
        finally:
            self._in_flight -= 1
        return True

    @property
    def chunk_bytes(self) -> int:
        """Audio bytes in each of an answer's `chunks`."""
        return 2 * int(PCM_BYTES_PER_S * self.service_s / max(1, self.chunks) / 2)

    async def _audio(self, writer: asyncio.StreamWriter, request_id: str) -> None:
        started = time.perf_counter()
        audio = b"\x01\x00" * (self.chunk_bytes // 2)
        rest = max(0.0, self.service_s - self.first_audio_s) / max(1, self.chunks - 1)
        for index in range(self.chunks):
            deadline = started + self.first_audio_s + index * rest
            await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
            await self._chunk(writer, audio)
            if index == 0:
                self.first_audio_sent_ns[request_id] = time.perf_counter_ns()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()

    @staticmethod
    async def _error(writer: asyncio.StreamWriter, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        writer.write(
            b"HTTP/1.1 %d Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )
        await writer.drain()
