"""A fleet on one machine: local instances behind a least-outstanding router, scaled by an
emulated target-tracking policy, so validate_live runs end to end without a cloud.

- Instances are calibration servers (cheap, known capacity) with the container's admission gate
  at the plan's queue_max_depth.
- The router is one HTTP endpoint in front of them; it sends each request to the instance with
  the fewest outstanding requests (:class:`LeastOutstandingTransport`, as the local ttotal probe
  does and SageMaker's LEAST_OUTSTANDING_REQUESTS routing does), relays the audio as it comes,
  and logs every dispatch with the instance's in-flight count before it.
- The policy is the plan's, through :class:`~pytest_tts_scaling.core.autoscaler.Autoscaler`
  (the same decisions the plan's simulation makes): each period's Maximum of in-flight per serving
  instance against the target, the scale-in alarm, both cooldowns, min and max. A scale-out
  instance serves `provision_s` after the decision (the emulated boot); a scale-in stops routing
  to one instance and stops it once its requests have finished (SIGTERM on the platform).

All of it runs on one asyncio loop in a thread; every time it logs is wall-clock ns, so it joins
with the load's records (`epoch_start_ns`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11

from pytest_tts_scaling.calibration import SerialStreamServer
from pytest_tts_scaling.calibration.streamserver import close_quietly, serve
from pytest_tts_scaling.core.autoscaler import Autoscaler, Policy
from pytest_tts_scaling.core.live import Dispatch, FleetEvent, FleetLog
from pytest_tts_scaling.core.records import AudioFormat, RequestSpec, StreamTimer
from pytest_tts_scaling.load.transports import Transport
from pytest_tts_scaling.load.transports.balanced import LeastOutstandingTransport
from pytest_tts_scaling.load.transports.http import HttpStreamTransport

# The period's Maximum is over the mean in-flight of each quarter period (sampled 5 times in
# each), as the plan's simulation takes it over its steps: a datapoint, not one instant's count.
STEPS_PER_PERIOD = 4
SAMPLES_PER_STEP = 5
READ_SIZE = 65536


class FleetRouter(LeastOutstandingTransport):
    """Least-outstanding routing that can stop routing to an instance (scale-in)."""

    def __init__(self, make_transport: Callable[[str], Transport], targets: list[str]):
        super().__init__(make_transport, targets)
        self.retired: set[str] = set()

    def serving(self) -> list[str]:
        return [t for t in self.outstanding if t not in self.retired]

    def pick(self) -> str:
        return min(self.serving(), key=lambda t: self.outstanding[t])


@dataclass
class _RelayTimer(StreamTimer):
    """Forwards each body piece to the client the moment it arrives (and counts it, so an
    answer that carried audio ends ok)."""

    forward: Callable[[bytes], None] | None = None
    on_started: Callable[[_RelayTimer], None] | None = None

    def started(self) -> None:
        super().started()
        if self.on_started is not None:
            self.on_started(self)

    def body(self, data: bytes, *, at_ns: int | None = None, kernel_stamped: bool = False) -> None:
        super().body(data, at_ns=at_ns, kernel_stamped=kernel_stamped)
        if self.forward is not None:
            self.forward(data)


class LocalFleet:
    """Start with `initial` instances; scale by `policy` (its durations in real seconds)."""

    def __init__(
        self,
        policy: Policy,
        *,
        instance: Callable[[], SerialStreamServer],
        initial: int | None = None,
    ):
        self.policy = policy
        self.make_instance = instance
        self.initial = policy.min_instances if initial is None else initial
        self.log = FleetLog()
        self.servers: dict[str, SerialStreamServer] = {}
        self.router = FleetRouter(HttpStreamTransport, [])
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._first_request = asyncio.Event()
        self._served: set[str] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> LocalFleet:
        for _ in range(self.initial):
            url = self._start_instance()
            self.router.add(url)
            self.log.initial.append(url)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the local fleet's router did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(15)
        for server in list(self.servers.values()):
            server.__exit__(None, None, None)
        self.servers.clear()

    def _start_instance(self) -> str:
        server = self.make_instance().__enter__()
        self.servers[server.base_url] = server
        return server.base_url

    def _serve(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            self._first_request = asyncio.Event()
            server = await serve(self._client, "127.0.0.1", 0)
            self.port = server.port
            ready.set()
            control = asyncio.create_task(self._control())
            try:
                await self._stop.wait()
            finally:
                control.cancel()  # the policy first, then the connections
                await server.shut()
                await self.router.aclose()

        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    # --- the emulated policy --------------------------------------------------------------

    async def _control(self) -> None:
        # The rehearsal starts in the plan's steady state: the policy starts with the traffic,
        # not in the idle seconds before it (which would scale the fleet in).
        await self._first_request.wait()
        scaler = Autoscaler(self.policy)
        sample_s = self.policy.period_s / (STEPS_PER_PERIOD * SAMPLES_PER_STEP)
        pending: list[float] = []  # monotonic ready times of instances being provisioned
        next_period = time.monotonic() + self.policy.period_s
        period_max = 0.0
        step: list[float] = []
        while True:
            await asyncio.sleep(sample_s)
            now = time.monotonic()
            for ready_at in [t for t in pending if t <= now]:
                pending.remove(ready_at)
                url = await asyncio.to_thread(self._start_instance)
                self.router.add(url)  # on this loop: the router is only touched here
                self._event("ready", url)
            self._stop_drained()
            serving = self.router.serving()
            in_flight = sum(self.router.outstanding[t] for t in serving)
            step.append(in_flight / len(serving))
            if len(step) == SAMPLES_PER_STEP:
                period_max = max(period_max, sum(step) / len(step))
                step = []
            if now < next_period:
                continue
            next_period += self.policy.period_s
            metric, period_max = period_max, 0.0
            decision = scaler.decide(now, metric, len(serving), len(pending))
            if decision is None:
                continue
            if decision.direction == "out":
                pending += [now + self.policy.provision_s] * decision.instances
                self._event("out", None, metric)
            else:
                victim = min(serving, key=lambda t: self.router.outstanding[t])
                self.router.retired.add(victim)
                self._event("in", victim, metric)

    def _stop_drained(self) -> None:
        for url in list(self.router.retired):
            server = self.servers.get(url)
            if server is not None and self.router.outstanding[url] == 0:
                del self.servers[url]
                threading.Thread(target=server.__exit__, args=(None, None, None)).start()
                self._event("stopped", url)

    def _event(self, kind: str, target: str | None, metric: float | None = None) -> None:
        serving = len(self.router.serving())
        self.log.events.append(FleetEvent(time.time_ns(), kind, target, serving, metric))

    # --- the router -----------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            async with self.router.session() as session:
                while True:
                    request, body = await _read_request(connection, reader)
                    if request is None:
                        break
                    self._first_request.set()
                    if request.target == b"/ping":
                        _respond(connection, writer, 200, b"ok")
                    else:
                        await self._relay(session, connection, writer, request, body)
                    await writer.drain()
                    if connection.our_state is not h11.DONE:
                        break
                    connection.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            await close_quietly(writer)

    async def _relay(
        self,
        session: Any,
        connection: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        body: bytes,
    ) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        spec = RequestSpec(
            request_id=headers.get("x-request-id") or uuid.uuid4().hex, body={}, raw=body
        )
        sent_head = False
        before: list[int] = []

        def forward(data: bytes) -> None:
            nonlocal sent_head
            if not sent_head:
                head = h11.Response(
                    status_code=200,
                    headers=[("content-type", "audio/pcm"), ("transfer-encoding", "chunked")],
                )
                writer.write(connection.send(head) or b"")
                sent_head = True
            writer.write(connection.send(h11.Data(data=data)) or b"")

        def on_started(timer: _RelayTimer) -> None:
            assert timer.target is not None
            before.append(self.router.outstanding[timer.target] - 1)

        timer = _RelayTimer(AudioFormat(), forward=forward, on_started=on_started)
        await session.send(spec, timer)
        target = timer.target or ""
        self.log.dispatches.append(
            Dispatch(time.time_ns(), target, before[0] if before else -1, timer.status)
        )
        if timer.status == "ok" and target not in self._served:
            self._served.add(target)
            if target not in self.log.initial:
                self._event("first_served", target)
        if sent_head:
            if timer.status != "ok":  # failed mid-stream: the client must not see a whole body
                raise ConnectionError(f"{target} failed mid-stream: {timer.error_code}")
            writer.write(connection.send(h11.EndOfMessage()) or b"")
            return
        if timer.status == "ok":
            _respond(connection, writer, 200, b"")
            return
        status = timer.http_status or 502
        # The transport keeps the container's error code (after an `http_<status>:` prefix);
        # the answer carries it back in the container's shape, as SageMaker passes it through.
        code = (timer.error_code or "error").removeprefix(f"http_{status}:")
        _respond(connection, writer, status, json.dumps({"error": code}).encode())


async def _read_request(
    connection: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(READ_SIZE))
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


def _respond(
    connection: h11.Connection, writer: asyncio.StreamWriter, status: int, body: bytes
) -> None:
    head = h11.Response(
        status_code=status,
        headers=[("content-type", "application/json"), ("content-length", str(len(body)))],
    )
    writer.write((connection.send(head) or b"") + (connection.send(h11.Data(data=body)) or b""))
    writer.write(connection.send(h11.EndOfMessage()) or b"")
