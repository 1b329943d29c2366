"""Is the endpoint there at all? One real request of the workload before the ladder (two, when
the first paid a cold start).

A refused connection, an error on every answer or silence is not a latency to hold against the SLO:
it ends the run at once with one line naming the endpoint and what was seen
(docs/method.md#endpoint-health). The same probe runs again when a rung hears nothing, to tell a
dead endpoint from a slow one.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.core.records import RequestRecord
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.errors import EndpointUnavailable
from pytest_tts_scaling.load.engine import ClosedLoop, MakeRequest, RungRun
from pytest_tts_scaling.load.transports import Transport

# A quick failure is tried this many times before the endpoint is called unavailable; a
# request that stalls is not retried (it already cost the stall bound).
PROBE_ATTEMPTS = 3
# The rung label of probe requests in records (no rung has concurrency 0).
PROBE_RUNG = 0
# A first answer this many times slower than the next reads as a cold start.
COLD_TIMES = 3.0

PHRASES = {
    "connection_refused": "connection refused",
    "dns_error": "its host name does not resolve",
    "tls_error": "the TLS handshake failed",
    "connect_timeout": "no connection could be opened",
    "connection_dropped": "the connection closed before an answer",
    "no_audio": "it answered without audio",
    "invocation_timeout": "no answer within the invocation limit",
}


@dataclass(frozen=True)
class Probe:
    """What the probe requests saw; `seen` is None when one of them came back with audio."""

    records: list[RequestRecord]
    seen: str | None

    @property
    def healthy(self) -> bool:
        return self.seen is None

    @property
    def answer(self) -> RequestRecord | None:
        """The last answer with audio: the warm one, where the first paid a cold start."""
        return next((r for r in reversed(self.records) if r.status == "ok"), None)

    @property
    def quietest_s(self) -> float:
        """The (warm) answer's longest silence, which the stall bound grows with."""
        return 0.0 if self.answer is None else silence_s(self.answer)

    def summary(self) -> dict[str, object]:
        """The artifact's note of the probe: how many requests, and the answer or the failure
        (with the cold first answer's TTFAB where it was asked again)."""
        answer = self.answer
        row: dict[str, object] = {"requests": len(self.records), "healthy": self.healthy}
        if answer is not None:
            row.update(ttfab_ms=answer.ttfab_ms, latency_ms=answer.latency_ms)
            first = next(r for r in self.records if r.status == "ok")
            if first is not answer:
                row["cold_ttfab_ms"] = first.ttfab_ms
        else:
            row["seen"] = self.seen
        return row


async def probe(
    transport: Transport,
    make_request: MakeRequest,
    *,
    stall_s: float,
    cold_s: float = math.inf,
    attempts: int = PROBE_ATTEMPTS,
) -> Probe:
    """Send the workload's requests one at a time until one comes back with audio, `attempts`
    fail quickly, or one stalls; bounded by about `attempts` × `stall_s`.

    An answer silent for longer than `cold_s` is asked for once more: a first request that
    loads a model or compiles a kernel is slow once, and only the warm answer's silence is the
    endpoint's own.
    """
    loop = ClosedLoop(transport, make_request, concurrency=1, label=PROBE_RUNG, stall_s=stall_s)

    def settled() -> bool:
        done = finished(loop.records)
        answers = [r for r in done if r.status == "ok"]
        return (
            any(silence_s(r) <= cold_s for r in answers)
            or len(answers) >= 2
            or len(done) >= attempts
            or any(r.status == "timeout" for r in done)
        )

    loop.start()
    try:
        await loop.wait_for(settled, timeout_s=attempts * stall_s + 1.0)
    finally:
        await loop.stop(drain_s=0)
    records = finished(loop.records)
    return Probe(records=records, seen=what_was_seen(records, stall_s))


def require_answer(
    endpoint: Endpoint,
    transport: str,
    make_request: MakeRequest,
    *,
    stall_s: float,
    cold_s: float = math.inf,
) -> Probe:
    """Probe before rung 1; an endpoint that does not answer ends the run (exit 2)."""
    result = asyncio.run(_probe_endpoint(endpoint, transport, make_request, stall_s, cold_s))
    learn_admission_bound(endpoint, result.records, "to the health probe")
    if not result.healthy:
        silent = all(r.status == "timeout" or _kind(r) == "stalled" for r in result.records)
        ping = endpoint.ping_words() if silent else None
        raise EndpointUnavailable(
            f"endpoint {endpoint.name} does not answer: {result.seen}"
            f"{f'; {ping}' if ping else ''}; nothing was measured"
        )
    return result


def first_answer_line(result: Probe) -> str | None:
    """How long the first answer took, where it was asked for again: a first answer far slower
    than the next looks like a cold start (weights loaded, kernels compiled on first use)."""
    summary = result.summary()
    return cold_start_line(summary.get("cold_ttfab_ms"), summary.get("ttfab_ms"))


def cold_start_line(cold_ms: object, warm_ms: object) -> str | None:
    """The line for a first answer (`cold_ms`) far slower than the next (`warm_ms`), as the
    artifact's probe note keeps them; None when there was no second answer or it was not."""
    if not isinstance(cold_ms, int | float) or not isinstance(warm_ms, int | float):
        return None
    cold, warm = cold_ms / 1000, warm_ms / 1000
    if cold < COLD_TIMES * warm:
        return None
    return (
        f"qmax: the first answer took {cold:.1f} s to its first audio, the next {warm:.2f} s: "
        "it looks like a cold start (weights loading or compiling on the first request), not "
        "the endpoint's speed; measuring goes on"
    )


def silence_after(
    endpoint: Endpoint, run: RungRun, transport: str, make_request: MakeRequest, *, stall_s: float
) -> str | None:
    """After a rung that heard no audio at all, probe again: what a dead endpoint showed, or
    None when it still answers (the rung was only slow or overloaded)."""
    if not run.stopped_answering and any(r.status == "ok" for r in run.records):
        return None
    return asyncio.run(_probe_endpoint(endpoint, transport, make_request, stall_s)).seen


def learn_admission_bound(endpoint: Endpoint, records: Sequence[RequestRecord], where: str) -> None:
    """The lowest `max_queue_depth` the endpoint's 503 answers named, kept on the endpoint."""
    named = [r.max_queue_depth for r in records if r.max_queue_depth is not None]
    if named:
        endpoint.observe_queue_max_depth(min(named), where)


async def _probe_endpoint(
    endpoint: Endpoint,
    transport: str,
    make_request: MakeRequest,
    stall_s: float,
    cold_s: float = math.inf,
) -> Probe:
    async with endpoint.transport(transport, concurrency=1) as opened:
        return await probe(opened, make_request, stall_s=stall_s, cold_s=cold_s)


def silence_s(answer: RequestRecord) -> float:
    """The longest an answer was silent: before its first audio, or between two chunks."""
    return max([answer.ttfab_ms or 0.0, *answer.gaps_ms]) / 1000.0


def finished(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Records of requests that ended by themselves (not cut when the probe stopped)."""
    return [r for r in records if r.error_code != "cancelled_at_drain"]


def what_was_seen(records: Sequence[RequestRecord], stall_s: float) -> str | None:
    """None if any request came back with audio; else the commonest failure, in words."""
    if any(r.status == "ok" for r in records):
        return None
    if not records:
        return f"no request was answered within {stall_s:g} s"
    kinds = Counter(_phrase(r, stall_s) for r in records)
    phrase, count = kinds.most_common(1)[0]
    return f"{phrase} ({count} of {len(records)} requests)"


def _kind(record: RequestRecord) -> str:
    return (record.error_code or record.status).partition(":")[0]


def _phrase(record: RequestRecord, stall_s: float) -> str:
    code = record.error_code or record.status
    kind, _, detail = code.partition(":")
    if record.status == "rejected":
        bound = record.max_queue_depth
        named = f", max_queue_depth {bound}" if bound is not None else ""
        return f"it rejects even one request ({code}{named})"
    if kind.startswith("http_"):
        status = kind.removeprefix("http_")
        said = f" {detail}" if detail else ""
        if status.startswith("4"):
            return f"every answer is HTTP {status}{said}: it refuses the workload's request"
        return f"every answer is HTTP {status}{said}: the endpoint is broken, not slow"
    if kind == "stalled":
        return f"it sent nothing for {stall_s:g} s (stalled)"
    if kind == "decode_error":
        return f"its answers do not decode ({detail.strip()})"
    return PHRASES.get(kind, code)
