"""One request's measurement: the timer transports report to, and the record it becomes.

TTFAB is taken where the first byte of audio samples arrives (docs/method.md): a transport hands
every
body byte it reads to :meth:`StreamTimer.body`, which skips a WAV header wherever the bytes carry
one, so no transport can mistake headers or control frames for audio.

A request that did not end in audio says why in `error_code`, with a stable prefix: `no_audio`
(an answer began, or ended, without audio), `http_<code>`, `connection_refused`, `dns_error`,
`tls_error`, `connect_timeout`, `connection_dropped`, `stalled`, `decode_error`,
`cancelled_at_drain`, `invocation_timeout`, `audio_short` and `audio_silent` (an answer judged
against the endpoint's own at N=1, core/audio.py); and one that is no error, `waited_past_bound`: a
request cut after waiting the stall bound for its body while the endpoint answered others (a
queue, not a fault: its TTFAB is past the bound, above the SLO).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any, Literal

from pytest_tts_scaling.core.audio import FRAME_S, levels, peak_rises
from pytest_tts_scaling.core.decoding import DecodeError, Decoder, RawAudioDecoder, ResponseFormat
from pytest_tts_scaling.core.playback import glitch_free_start, played_at
from pytest_tts_scaling.core.stats import underrun_s

RequestStatus = Literal["ok", "rejected", "error", "timeout"]
# Cut for silence: after part of its body came, or while nothing else was answered (a fault) ...
STALLED = "stalled"
# ... or before any of its body while the endpoint answered others (a queue: slow, not broken).
WAITED_PAST_BOUND = "waited_past_bound"
REJECTION_CODES = frozenset({408, 429, 503})


class NetworkError(OSError):
    """A failure the transport recognised below HTTP (a name that does not resolve, a TLS
    handshake refused): it names it, since the record opens no socket and cannot tell."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConnectTimeout(NetworkError):
    """The connection to the endpoint was not established in time."""

    def __init__(self, message: str) -> None:
        super().__init__("connect_timeout", message)


@dataclass(frozen=True)
class AudioFormat:
    """How many bytes make a second of audio, unless a WAV header in the answer says otherwise."""

    sample_rate: int = 24000
    sample_width: int = 2
    channels: int = 1

    @property
    def bytes_per_second(self) -> int:
        """0 for payloads that are not audio (an embedding, say): they have no duration."""
        return self.sample_rate * self.sample_width * self.channels


@dataclass(frozen=True)
class HttpRequest:
    """The HTTP face of a request, as the scenario describes it.

    `headers` hold their values (an API key, say) for sending only: records and artifacts name
    headers, never their values.
    """

    method: str = "POST"
    path: str = "/invocations"
    headers: tuple[tuple[str, str], ...] = ()

    def sent_headers(self, defaults: dict[str, str]) -> dict[str, str]:
        """The defaults, with the scenario's headers in place of those of the same name."""
        ours = {name.lower() for name, _ in self.headers}
        kept = {name: value for name, value in defaults.items() if name.lower() not in ours}
        return {**kept, **dict(self.headers)}


@dataclass(frozen=True)
class HangUp:
    """The listener closes `fraction` of the requests once `after_audio_s` of audio arrived.

    Which: input number i (the numbering that picks texts, worker + seq·N) is hung up when
    floor((i + 1)·fraction) > floor(i·fraction), so every run of requests in that order holds
    the share to within one, the same on every run and at every concurrency.
    """

    fraction: float
    after_audio_s: float

    def hangs_up(self, index: int) -> bool:
        return math.floor((index + 1) * self.fraction) > math.floor(index * self.fraction)


@dataclass(frozen=True)
class RequestSpec:
    """What one request sends, how its answer carries the payload, and what records join on.

    `body` is the JSON object of the container's contract; a payload template renders `raw`
    instead, which is then sent as it is.
    """

    request_id: str
    body: dict[str, Any]
    audio: AudioFormat = field(default_factory=AudioFormat)
    voice: str | None = None
    text_chars: int = 0
    raw: bytes | None = None
    response: ResponseFormat | None = None
    component: str | None = None
    text: str | None = None
    http: HttpRequest = field(default_factory=HttpRequest)
    # The listener hangs up once this many seconds of audio have arrived (docs/workloads.md).
    hang_up_after_s: float | None = None

    @property
    def payload(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.body).encode()

    def decoder(self) -> Decoder:
        return (self.response or ResponseFormat()).decoder()

    def timer(self) -> StreamTimer:
        """A fresh timer for this request's answer: its audio format, decoder and hang-up."""
        return StreamTimer(self.audio, decoder=self.decoder(), hang_up_after_s=self.hang_up_after_s)

    def input_row(self, *, rung: int, worker: int, seq: int) -> dict[str, Any]:
        """What was sent, as the per-request inputs JSONL holds it (joins records on request_id)."""
        return {
            "request_id": self.request_id,
            "rung": rung,
            "worker": worker,
            "seq": seq,
            "text": self.text,
            "voice": self.voice,
            "component": self.component,
            "payload_bytes": len(self.payload),
        }


@dataclass
class StreamTimer:
    """Collects the times of one exchange on the monotonic clock (ns)."""

    audio: AudioFormat
    decoder: Decoder | None = None
    clock_ns: Any = time.perf_counter_ns
    start_ns: int | None = None
    first_audio_ns: int | None = None
    end_ns: int | None = None
    audio_bytes: int = 0
    chunks: list[tuple[int, int]] = field(default_factory=list)
    http_status: int | None = None
    status: RequestStatus = "error"
    error_code: str | None = None
    target: str | None = None
    # The admission bound a 503 answer's body named (`max_queue_depth`), if it named one.
    max_queue_depth: int | None = None
    # When the endpoint last showed life on this exchange: the request written, or bytes read.
    last_activity_ns: int | None = None
    # The listener closes the answer once this many seconds of audio have arrived; when the
    # piece that reached it was read, if one did (the transport then closes the connection).
    hang_up_after_s: float | None = None
    hung_up_ns: int | None = None
    # The first audio's time is the kernel's arrival stamp, not when the client read it.
    first_audio_kernel_stamped: bool = False

    def __post_init__(self) -> None:
        if self.decoder is None:
            self.decoder = RawAudioDecoder()

    def started(self) -> None:
        """Call just before the request is written."""
        self.start_ns = self.last_activity_ns = self.clock_ns()

    def body(self, data: bytes, *, at_ns: int | None = None, kernel_stamped: bool = False) -> None:
        """Call for every body byte read; only payload (audio) bytes are timed.

        `at_ns`: when the bytes arrived, where the transport knows (on this clock); else now.
        `kernel_stamped`: that time is the kernel's arrival stamp. A stamp from before the
        request was written (a wall clock stepped forward since) is not believed: then now.
        """
        assert self.decoder is not None
        if at_ns is None or (self.start_ns is not None and at_ns < self.start_ns):
            at_ns, kernel_stamped = self.clock_ns(), False
        self.last_activity_ns = at_ns
        self._arrived(at_ns, self.decoder.feed(data), kernel_stamped)

    def finished(self, status: RequestStatus, error_code: str | None = None) -> None:
        """Call once when the exchange ends.

        An answer that ends well but carried no payload, or decodes badly, is an error.
        """
        now = self.clock_ns()
        if status == "ok" and self.hung_up_ns is not None:
            # Hung up: the answer ends where the listener closed it, its rest never read.
            now = self.hung_up_ns
        elif status == "ok":
            assert self.decoder is not None
            try:
                self._arrived(now, self.decoder.finish(), kernel_stamped=False)
            except DecodeError as exc:
                status, error_code = "error", f"decode_error: {exc}"
            else:
                if self.first_audio_ns is None:
                    status, error_code = "error", "no_audio"
        self.end_ns = now
        self.status = status
        self.error_code = error_code

    def failed(self, exc: BaseException, *, answered: bool | None = None) -> None:
        """The exchange broke with `exc` (a socket or protocol error): record what was seen.

        `answered`: whether the endpoint had begun its answer; by default, whether a status
        line arrived.
        """
        if self.start_ns is None:
            self.started()
        began = self.http_status is not None if answered is None else answered
        self.finished("error", failure_code(exc, answered=began, audio=self.audio_bytes > 0))

    @property
    def bytes_per_second(self) -> int:
        """From the answer's WAV header where it had one, else from the requested format."""
        declared = self.decoder.wav_bytes_per_second if self.decoder is not None else None
        return declared or self.audio.bytes_per_second

    def _arrived(self, now: int, payload: int, kernel_stamped: bool) -> None:
        if payload <= 0:
            return
        if self.first_audio_ns is None:
            self.first_audio_ns = now
            self.first_audio_kernel_stamped = kernel_stamped
        self.audio_bytes += payload
        self.chunks.append((now, payload))
        if (
            self.hang_up_after_s is not None
            and self.hung_up_ns is None
            and self.audio_bytes >= self.hang_up_after_s * self.bytes_per_second > 0
        ):
            self.hung_up_ns = now


@dataclass(frozen=True)
class RequestRecord:
    """A finished request as written to the per-request JSONL (docs/artifacts.md) and summarized
    per rung."""

    request_id: str
    rung: int
    worker: int
    start_ns: int
    end_ns: int
    status: RequestStatus
    error_code: str | None
    http_status: int | None
    ttfab_ms: float | None
    latency_ms: float
    audio_bytes: int
    audio_s: float
    underrun_ms: float | None
    gaps_ms: tuple[float, ...]
    voice: str | None
    text_chars: int
    epoch_start_ns: int
    target: str | None = None
    component: str | None = None
    max_queue_depth: int | None = None
    # The peak |sample| of each chunk (16-bit audio), and the answer's quietest 10 ms: what the
    # audio checks read (core/audio.py); empty and None where the payload is not 16-bit audio.
    chunk_peaks: tuple[int, ...] = ()
    audio_floor: int | None = None
    # When the first chunk above the endpoint's silence level at N=1 arrived (ms from start).
    audible_ms: float | None = None
    # The listener's clocks (core/playback.py), ms from start: when the first sample above that
    # silence level plays, and the earliest start from which playback never runs dry.
    speech_ms: float | None = None
    glitch_free_ms: float | None = None
    # (|sample|, when it plays in ms from start) wherever the answer's running peak rises
    # (audio.peak_rises): the audible start for any silence level, read after the N=1 rung.
    peak_rises: tuple[tuple[int, float], ...] = ()
    # The listener hung up once its audio had arrived (a scenario's [listener] table): served,
    # with only the answer's beginning.
    hung_up: bool = False
    # The first audio was timed by the kernel's arrival stamp (plain HTTP on Linux), not by when
    # the client read it (arrival.py says when that stamp is the piece's own).
    first_audio_kernel_stamped: bool = False

    @classmethod
    def from_timer(
        cls,
        timer: StreamTimer,
        spec: RequestSpec,
        *,
        rung: int,
        worker: int,
        epoch_offset_ns: int,
        levels: bool = True,
    ) -> RequestRecord:
        """`epoch_offset_ns` converts the monotonic clock to wall-clock ns for joins. `levels`
        False leaves the audio levels to :meth:`with_levels`, so a load engine can read them
        after its load instead of as each request ends, beside other streams' reads."""
        assert timer.start_ns is not None
        assert timer.end_ns is not None
        bps = timer.bytes_per_second
        ttfab_ms = ms(timer.first_audio_ns - timer.start_ns) if timer.first_audio_ns else None
        times = [at for at, _ in timer.chunks]
        gaps = tuple(ms(b - a) for a, b in pairwise(times))
        underrun = glitch_free = None
        pieces = played_pieces(timer)
        if timer.first_audio_ns is not None and pieces:
            underrun = underrun_s(pieces[0][0], pieces)
            glitch_free = glitch_free_start(pieces)
        peaks, floor, rises = audio_levels(timer) if levels else ((), None, ())
        return cls(
            request_id=spec.request_id,
            rung=rung,
            worker=worker,
            start_ns=timer.start_ns,
            end_ns=timer.end_ns,
            status=timer.status,
            error_code=timer.error_code,
            http_status=timer.http_status,
            ttfab_ms=ttfab_ms,
            latency_ms=ms(timer.end_ns - timer.start_ns),
            audio_bytes=timer.audio_bytes,
            audio_s=timer.audio_bytes / bps if bps > 0 else 0.0,
            underrun_ms=underrun,
            gaps_ms=gaps,
            voice=spec.voice,
            text_chars=spec.text_chars,
            epoch_start_ns=timer.start_ns + epoch_offset_ns,
            target=timer.target,
            component=spec.component,
            max_queue_depth=timer.max_queue_depth,
            chunk_peaks=peaks,
            audio_floor=floor,
            glitch_free_ms=glitch_free,
            peak_rises=rises,
            hung_up=timer.status == "ok" and timer.hung_up_ns is not None,
            first_audio_kernel_stamped=timer.first_audio_kernel_stamped,
        )

    def with_levels(self, timer: StreamTimer) -> RequestRecord:
        """The record with the audio levels of its timer's payload (see `from_timer`)."""
        peaks, floor, rises = audio_levels(timer)
        return replace(self, chunk_peaks=peaks, audio_floor=floor, peak_rises=rises)

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["gaps_ms"] = list(self.gaps_ms)
        row["chunk_peaks"] = list(self.chunk_peaks)
        row["peak_rises"] = [list(rise) for rise in self.peak_rises]
        return row


def played_pieces(timer: StreamTimer) -> list[tuple[float, float]]:
    """Each piece in ms from the start: arrival, audio carried (a payload that is not audio, an
    embedding say, has no duration and no pieces to play)."""
    bps = timer.bytes_per_second
    if bps <= 0 or timer.start_ns is None:
        return []
    return [((at - timer.start_ns) / 1e6, 1000.0 * n / bps) for at, n in timer.chunks]


def audio_levels(
    timer: StreamTimer,
) -> tuple[tuple[int, ...], int | None, tuple[tuple[int, float], ...]]:
    """The peak of each chunk, the quietest frame's (core/audio.py) and the running peak's rises
    with when each plays, of 16-bit audio; empty and None for a payload that is not."""
    bps = timer.bytes_per_second
    payload = timer.decoder.payload if timer.decoder is not None else b""
    if timer.audio.sample_width != 2 or bps <= 0 or not len(payload) == timer.audio_bytes > 0:
        return (), None, ()
    frame = max(1, round(FRAME_S * bps / 2))
    chunk_peaks, floor = levels(payload, [n for _, n in timer.chunks], frame)
    found = peak_rises(payload)
    plays = played_at(played_pieces(timer), [2000.0 * index / bps for index, _ in found])
    rises = tuple(
        (level, at) for (_, level), at in zip(found, plays, strict=True) if at is not None
    )
    return tuple(chunk_peaks), floor, rises


def ms(ns: int) -> float:
    return ns / 1e6


def failure_code(exc: BaseException, *, answered: bool, audio: bool) -> str:
    """The error code of a broken exchange: where it broke, not the exception's class name."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused"
    if isinstance(exc, NetworkError):
        return exc.code
    if answered and not audio:
        return "no_audio"
    return "connection_dropped"
