"""`response-stream` against a URL: POST /invocations, read the chunked body as it arrives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from pytest_tts_scaling.records import RequestSpec, StreamTimer
from pytest_tts_scaling.transports import INVOCATION_LIMIT_S, Session, Transport, error_outcome


class HttpStreamTransport(Transport):
    name = "response-stream"

    def __init__(
        self, base_url: str, *, max_connections: int, timeout_s: float = INVOCATION_LIMIT_S
    ):
        self.url = f"{base_url.rstrip('/')}/invocations"
        self.timeout_s = timeout_s
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        yield _HttpSession(self)


class _HttpSession:
    def __init__(self, transport: HttpStreamTransport):
        self.transport = transport

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        client = self.transport.client
        http_request = client.build_request(
            "POST",
            self.transport.url,
            json=request.body,
            headers={"X-Request-Id": request.request_id, "Accept": "audio/*"},
        )
        try:
            async with asyncio.timeout(self.transport.timeout_s):
                timer.started()
                response = await client.send(http_request, stream=True)
                try:
                    timer.http_status = response.status_code
                    if response.status_code != 200:
                        status, code = error_outcome(response.status_code, await response.aread())
                        timer.finished(status, code)
                        return
                    async for data in response.aiter_raw():
                        timer.body(data)
                finally:
                    await response.aclose()
        except TimeoutError:
            timer.finished("timeout", "invocation_timeout")
            return
        except httpx.HTTPError as exc:
            timer.finished("error", type(exc).__name__)
            return
        timer.finished("ok")
