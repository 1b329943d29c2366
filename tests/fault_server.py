"""The calibration server (`pytest_tts_scaling.calibration`) with the faults it lacks: an error
status on every answer, a cold first request, and dying mid-run (the port then refuses
connections). Its own faults (gate, drops, stalls, WAV header) come through its `faults`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from pytest_tts_scaling.calibration import SerialStreamServer


@dataclass
class FaultServer(SerialStreamServer):
    status: int = 200  # not 200: every answer has this status and a JSON error body
    cold_s: float = 0.0  # the first request waits this long first (a model loaded on first use)

    async def _invocation(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request_id: str
    ) -> None:
        cold_s, self.cold_s = self.cold_s, 0.0
        if cold_s > 0:
            await asyncio.sleep(cold_s)
        if self.status == 200:
            await super()._invocation(reader, writer, request_id)
            return
        self.requests_seen += 1
        body = json.dumps({"error": "internal_error"}).encode()
        writer.write(
            b"HTTP/1.1 %d Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (self.status, len(body), body)
        )
        await writer.drain()

    def stop_listening(self) -> None:
        """The server dies: the port refuses connections and open ones are closed."""
        loop, server = self._loop, self._server
        assert loop is not None
        assert server is not None
        asyncio.run_coroutine_threadsafe(server.shut(), loop).result(10)
