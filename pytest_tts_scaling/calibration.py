"""A streaming server whose true Q_max is known, for checking the measurement chain end to end.

It serves `slots` requests at a time (1 = serial), each taking `first_audio_s` to its first audio
chunk and `service_s` in all; others wait in a FIFO queue. The body is raw PCM, JSON lines
carrying base64 audio (`jsonl`), or one JSON document with an embedding (`json`, sent whole at
the end, as a non-TTS endpoint would). Response headers go out on arrival,
before any queueing, so a client that took headers for audio would be caught. It records when it
wrote each request's first audio byte, so the client's TTFAB error can be measured.

With a closed loop of N workers and one slot, a request waits for the N − 1 ahead of it, so
TTFAB = (N − 1)·service_s + first_audio_s and Q_max = floor((SLO − first_audio_s)/service_s) + 1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

PCM_BYTES_PER_S = 48000  # 24 kHz, 16-bit mono, as the real container sends


@dataclass
class SerialStreamServer:
    service_s: float = 0.1
    first_audio_s: float = 0.05
    chunks: int = 4
    slots: int = 1
    body_format: Literal["raw", "jsonl", "json"] = "raw"
    host: str = "127.0.0.1"
    port: int = 0
    first_audio_sent_ns: dict[str, int] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None

    def true_qmax(self, slo_ms: float) -> int:
        """The Q_max a perfect client would measure against this server with one slot."""
        return int((slo_ms / 1000.0 - self.first_audio_s) // self.service_s) + 1

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> SerialStreamServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._slots = asyncio.Semaphore(self.slots)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port, backlog=4096)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("calibration server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def shutdown() -> None:
            server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET" and path == "/ping":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    await writer.drain()
                    continue
                request_id = headers.get("x-request-id") or json.loads(body or b"{}").get(
                    "request_id", ""
                )
                await self._stream(writer, request_id)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Only the server's own shutdown cancels a handler; end it quietly.
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _stream(self, writer: asyncio.StreamWriter, request_id: str) -> None:
        kind = b"application/json" if self.body_format != "raw" else b"audio/pcm;rate=24000"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n" % kind
        )
        await writer.drain()
        rest = max(0.0, self.service_s - self.first_audio_s) / max(1, self.chunks - 1)
        audio = b"\x00" * int(PCM_BYTES_PER_S * self.service_s / max(1, self.chunks))
        async with self._slots:
            started = time.perf_counter()
            await asyncio.sleep(self.first_audio_s)
            for index in range(self.chunks):
                if index:
                    deadline = started + self.first_audio_s + index * rest
                    await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
                if self.body_format == "json":
                    continue
                chunk = audio
                if self.body_format == "jsonl":
                    encoded = base64.b64encode(audio).decode()
                    chunk = json.dumps({"audio": encoded, "index": index}).encode() + b"\n"
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                if index == 0:
                    self.first_audio_sent_ns[request_id] = time.perf_counter_ns()
            if self.body_format == "json":
                document = json.dumps({"embedding": [0.125] * 384, "request_id": request_id})
                chunk = document.encode()
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                self.first_audio_sent_ns[request_id] = time.perf_counter_ns()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
