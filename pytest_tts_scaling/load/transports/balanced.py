"""Spread requests over several instances by fewest outstanding requests.

This is what SageMaker's LEAST_OUTSTANDING_REQUESTS routing does; locally it lets the scale-out
probe load a second instance as soon as that one is ready, as the platform's router would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

from pytest_tts_scaling.core.records import RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import Session, Transport


class LeastOutstandingTransport(Transport):
    def __init__(self, make_transport: Callable[[str], Transport], targets: list[str]):
        self.make_transport = make_transport
        self.transports: dict[str, Transport] = {}
        self.outstanding: dict[str, int] = {}
        for target in targets:
            self.add(target)
        self.name = next(iter(self.transports.values())).name if self.transports else "balanced"

    def add(self, target: str) -> None:
        """Start routing to one more instance (it must already answer requests)."""
        if target not in self.transports:
            self.transports[target] = self.make_transport(target)
            self.outstanding[target] = 0

    def pick(self) -> str:
        return min(self.outstanding, key=lambda t: self.outstanding[t])

    async def aclose(self) -> None:
        for transport in self.transports.values():
            await transport.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        async with AsyncExitStack() as stack:
            yield _BalancedSession(self, stack)


class _BalancedSession:
    def __init__(self, balancer: LeastOutstandingTransport, stack: AsyncExitStack):
        self.balancer = balancer
        self.stack = stack
        self.sessions: dict[str, Session] = {}

    async def send(self, request: RequestSpec, timer: StreamTimer) -> None:
        target = self.balancer.pick()
        if target not in self.sessions:
            opened = self.balancer.transports[target].session()
            self.sessions[target] = await self.stack.enter_async_context(opened)
        timer.target = target
        self.balancer.outstanding[target] += 1
        try:
            await self.sessions[target].send(request, timer)
        finally:
            self.balancer.outstanding[target] -= 1
