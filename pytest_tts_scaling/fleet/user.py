"""The Locust users of `tts-bench load`: our transports' contract, timed by our StreamTimer.

Importing this module imports Locust, which monkey-patches the standard library with gevent:
only the load command and its worker processes import it.

Every user times an exchange with :class:`~pytest_tts_scaling.core.records.StreamTimer`, the
timer the qmax engine uses, so TTFAB is the first byte of audio samples on every transport (WAV
headers and JSON/base64 bodies through the same decoders) and the records are the same JSONL rows.

- chunked HTTP on Locust's FastHttpUser (geventhttpclient). Its `read(n)` waits until n bytes
  are buffered, so the body is read piece by piece as it arrives (:func:`body_pieces`). A user's
  connection opens inside its first request, so that one request's TTFAB includes the connect
  (the qmax engine opens it before); every later request reuses it;
- the SageMaker response stream through boto3 (TTFAB at the first PayloadPart with audio);
- the WebSocket session (websocket-client), one session per user.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

import gevent
import gevent.event
from locust import FastHttpUser, User, task
from locust.exception import StopUser

from pytest_tts_scaling.core.arrivals import Pacer
from pytest_tts_scaling.core.records import RequestRecord, RequestSpec, StreamTimer
from pytest_tts_scaling.fleet.config import LoadConfig
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S, error_outcome, named

READ_SIZE = 65536
# After a rejection or an error a closed-loop user pauses this long (as the qmax engine does).
REJECTION_BACKOFF_S = 0.05
CLOSED_RAMP_S = 1.0


class ProcessState:
    """What the users of one process share: the config, the pacer, and the records so far."""

    def __init__(self, config: LoadConfig):
        import numpy as np

        self.config = config
        self.workload = config.workload()
        self.go = gevent.event.Event()
        self.start_ns = 0
        self.pacer: Pacer | None = None
        self.offsets = np.asarray(config.offsets_s, dtype=float)
        self.draining = False
        self.in_flight = 0
        self.unsent = 0
        self.failure: str | None = None
        self.rows: list[dict[str, Any]] = []
        self.inputs: list[dict[str, Any]] = []
        self.users = 0
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()

    def begin(self, start_epoch_ns: int) -> None:
        """Release the users at `start_epoch_ns` (wall clock, so hosts agree)."""
        self.start_ns = start_epoch_ns - self.epoch_offset_ns
        if self.config.mode == "open":
            self.pacer = Pacer(
                self.offsets, self.start_ns, clock_ns=time.perf_counter_ns, sleep=gevent.sleep
            )
        self.go.set()

    def next_user(self) -> int:
        """A load-wide user index: process i numbers its users i, i + P, i + 2P, ..."""
        local = self.users
        self.users += 1
        return self.config.worker_index + local * self.config.worker_count

    @property
    def finished(self) -> bool:
        """Nothing more to send: drained, or (open loop) the schedule spent."""
        spent = self.pacer is not None and self.pacer.remaining == 0
        return self.draining or spent

    def take_rows(self) -> dict[str, list[dict[str, Any]]]:
        """The records and inputs since the last call, for the master."""
        taken = {"rows": self.rows, "inputs": self.inputs}
        self.rows, self.inputs = [], []
        return taken


class StreamingUser(User):
    """Sends requests one at a time: back to back (closed loop) or at the pacer's times (open)."""

    abstract = True
    state: ClassVar[ProcessState | None] = None

    def on_start(self) -> None:
        assert self.state is not None, "the load's configuration arrives before users spawn"
        self.index = self.state.next_user()
        self.seq = 0

    @task
    def stream(self) -> None:
        state = self.state
        assert state is not None
        try:
            self._stream(state)
        except (StopUser, gevent.GreenletExit):
            raise
        except Exception as exc:  # a bug, not a failed request: end the load and say why
            state.failure = f"{type(exc).__name__}: {exc}"
            state.draining = True
        raise StopUser()

    def _stream(self, state: ProcessState) -> None:
        state.go.wait()
        if state.pacer is None:
            # Closed loop: user i of N starts i/N of a ramp after the start, so N streams do not
            # begin (and, with equal service times, stay) in lockstep.
            gevent.sleep(CLOSED_RAMP_S * self.index / max(1, state.config.users))
        while not state.finished:
            # Counted from the claim: a user asleep until its arrival is due still owes a send.
            state.in_flight += 1
            try:
                due_ns: int | None = None
                if state.pacer is not None:
                    send = state.pacer.claim()
                    if send is None:
                        break
                    if state.draining:
                        state.unsent += 1
                        break
                    due_ns = send.due_ns
                outcome = self.one(state, due_ns)
            finally:
                state.in_flight -= 1
            if state.pacer is None and outcome in ("rejected", "error"):
                gevent.sleep(REJECTION_BACKOFF_S)
        self.close()

    def one(self, state: ProcessState, due_ns: int | None) -> str:
        spec = state.workload.request(state.config.users, self.index, self.seq)
        state.inputs.append(
            spec.input_row(rung=state.config.label, worker=self.index, seq=self.seq)
        )
        self.seq += 1
        timer = StreamTimer(spec.audio, decoder=spec.decoder())
        try:
            with gevent.Timeout(state.config.timeout_s, False):
                self.exchange(spec, timer)
        except Exception as exc:  # a broken connection ends this request, not the user
            if timer.end_ns is None:
                timer.failed(named(exc))  # the engine's stable codes: connection_refused, ...
            self.close()
        if timer.start_ns is None:
            timer.started()
        if timer.end_ns is None:
            timer.finished("timeout", "invocation_timeout")
            self.close()
        record = RequestRecord.from_timer(
            timer,
            spec,
            rung=state.config.label,
            worker=self.index,
            epoch_offset_ns=state.epoch_offset_ns,
        )
        row = record.to_json()
        row["process"] = state.config.worker_index
        if due_ns is not None:
            row["due_epoch_ns"] = due_ns + state.epoch_offset_ns
            row["send_lag_ms"] = (record.start_ns - due_ns) / 1e6
        state.rows.append(row)
        self.environment.events.request.fire(
            request_type=state.config.transport,
            name="invocations",
            response_time=record.ttfab_ms if record.ttfab_ms is not None else record.latency_ms,
            response_length=record.audio_bytes,
            exception=None if record.status == "ok" else RuntimeError(record.error_code),
            context={},
        )
        return record.status

    def exchange(self, spec: RequestSpec, timer: StreamTimer) -> None:
        """Send one request; call timer.started/body/finished (errors may raise)."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop this user's connection (after an error or at the end)."""


def body_pieces(raw: Any) -> Iterator[bytes]:
    """Body bytes of a geventhttpclient response as each piece arrives.

    Its `read(n)` keeps reading until n bytes are buffered, which would time the first audio
    byte late by however long the server takes to send the rest of n; this yields whatever the
    parser has after every socket read instead.
    """
    while True:
        if raw._body_buffer:
            piece = bytes(raw._body_buffer)
            del raw._body_buffer[:]
            yield piece
            continue
        sock = raw._sock
        if raw.message_complete or sock is None:
            return
        data = sock.recv(READ_SIZE)
        if not data:
            raise ConnectionError("connection closed mid-body")
        raw.feed(data)


class HttpStreamUser(StreamingUser, FastHttpUser):
    """POST /invocations (or the scenario's request) over one keep-alive connection, the body
    timed as it arrives."""

    abstract = True
    concurrency = 1
    network_timeout = INVOCATION_LIMIT_S
    connection_timeout = 10.0

    def exchange(self, spec: RequestSpec, timer: StreamTimer) -> None:
        headers = spec.http.sent_headers(
            {
                "Content-Type": "application/json",
                "Accept": "audio/*",
                "Accept-Encoding": "identity",
                "X-Request-Id": spec.request_id,
            }
        )
        timer.started()
        with self.client.request(
            spec.http.method,
            spec.http.path,
            data=spec.payload,  # type: ignore[arg-type]  # geventhttpclient sends bytes as they are
            headers=headers,
            stream=True,
            catch_response=True,
            name="invocations",
        ) as response:
            raw = getattr(response, "_response", None)
            if raw is None or not response.status_code:
                error = getattr(response, "error", None)
                timer.failed(
                    named(error) if isinstance(error, BaseException) else ConnectionError()
                )
            elif response.status_code == 200:
                timer.http_status = 200
                for piece in body_pieces(raw):
                    timer.body(piece)
                timer.finished("ok")
            else:
                timer.http_status = response.status_code
                outcome, code = error_outcome(response.status_code, b"".join(body_pieces(raw)))
                timer.finished(outcome, code)
            # Our own record is the measurement; Locust's statistics get TTFAB, not headers.
            response.request_meta["response_time"] = _ms_or_none(timer) or 0.0
            if timer.status == "ok":
                response.success()
            else:
                response.failure(timer.error_code or timer.status)

    def close(self) -> None:
        self.client.client.clientpool.close()


class WebSocketUser(StreamingUser):
    """One WebSocket session per user; each request is one JSON text frame (docs/container.md)."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self.connection: Any = None

    def _connect(self) -> Any:
        import websocket  # websocket-client: plain sockets, so gevent schedules it

        from pytest_tts_scaling.load.transports.websocket import BIDI_PATH

        assert self.host is not None
        url = "ws" + self.host.rstrip("/").removeprefix("http") + BIDI_PATH
        return websocket.create_connection(
            url, timeout=INVOCATION_LIMIT_S, enable_multithread=False
        )

    def exchange(self, spec: RequestSpec, timer: StreamTimer) -> None:
        from pytest_tts_scaling.load.transports.websocket import control_frame

        if self.connection is None:
            self.connection = self._connect()
        timer.started()
        self.connection.send(spec.payload.decode())
        while True:
            opcode, frame = self.connection.recv_data()
            if opcode == 0x2:  # binary: audio
                timer.body(frame)
            elif opcode == 0x1 and control_frame(frame.decode(), timer):
                return

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


class SageMakerStreamUser(StreamingUser):
    """InvokeEndpointWithResponseStream through boto3; TTFAB at the first PayloadPart of audio.

    The SDK does not retry: a retried 503 would hide a rejection and inflate TTFAB.
    """

    abstract = True
    _client: ClassVar[Any] = None
    _transport: ClassVar[Any] = None

    @classmethod
    def client(cls, state: ProcessState) -> tuple[Any, Any]:
        """This process's boto3 client (thread-safe, shared by its users) and the transport
        that builds each invocation's arguments, as the qmax engine sends them."""
        if cls._client is None:
            import boto3
            from botocore.config import Config

            from pytest_tts_scaling.load.transports.sagemaker_stream import SageMakerStreamTransport

            users = max(1, state.config.users)
            cls._transport = SageMakerStreamTransport(state.config.target, concurrency=users)
            cls._client = boto3.client(
                "sagemaker-runtime",
                config=Config(
                    max_pool_connections=users,
                    connect_timeout=10,
                    read_timeout=INVOCATION_LIMIT_S + 5,
                    retries={"mode": "standard", "total_max_attempts": 1},
                ),
            )
        return cls._client, cls._transport

    def exchange(self, spec: RequestSpec, timer: StreamTimer) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        from pytest_tts_scaling.load.transports.sagemaker_stream import finish_client_error

        assert self.state is not None
        client, transport = self.client(self.state)
        arguments = transport.arguments(spec)
        timer.started()
        try:
            response = client.invoke_endpoint_with_response_stream(**arguments)
            timer.http_status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
            for event in response["Body"]:
                part = event.get("PayloadPart")
                if part is not None:
                    timer.body(part.get("Bytes") or b"")
        except ClientError as exc:
            finish_client_error(timer, exc)
            return
        except (BotoCoreError, OSError) as exc:
            timer.finished("error", type(exc).__name__)
            return
        timer.finished("ok")


def _ms_or_none(timer: StreamTimer) -> float | None:
    if timer.start_ns is None:
        return None
    end = timer.first_audio_ns or timer.end_ns
    return None if end is None else (end - timer.start_ns) / 1e6


class TtsHttpUser(HttpStreamUser):
    pass


class TtsWebSocketUser(WebSocketUser):
    pass


class TtsSageMakerUser(SageMakerStreamUser):
    host = "sagemaker"


USER_CLASSES: tuple[type[StreamingUser], ...] = (TtsHttpUser, TtsWebSocketUser, TtsSageMakerUser)


def user_class(config: LoadConfig) -> type[StreamingUser]:
    """The user class for this load's transport, pointed at its target."""
    if config.kind == "sagemaker":
        return TtsSageMakerUser
    chosen: type[StreamingUser] = TtsWebSocketUser if config.transport == "bidi" else TtsHttpUser
    chosen.host = config.target
    return chosen


def configure(config: LoadConfig) -> ProcessState:
    """Make `config` this process's load: every user spawned from now on shares the state."""
    state = ProcessState(config)
    StreamingUser.state = state
    user_class(config)
    return state
