"""The segment scheduler: its pure queue on a fake clock, and the executor's workers around it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from container_fakes import WAIT_S, FakeEngine, until
from tts_container.concurrency import InferenceExecutor, SynthesisCancelled
from tts_container.request import SynthesisRequest
from tts_container.scheduler import Policy, SegmentQueue, Stream
from tts_container.settings import Settings, SettingsError

EDF = Policy(mode="edf", batch_max=1, margin_s=0.0, max_wait_s=100.0)


def play(queue: SegmentQueue, stream: Stream, now: float, audio_s: float) -> None:
    """``stream``'s segment with ``audio_s`` of audio is ready at ``now``; more follow."""
    queue.finished(stream, now, audio_s, more=True)


class TestOrdering:
    def test_fifo_runs_the_oldest_request_whole_before_the_next(self) -> None:
        queue = SegmentQueue(Policy(mode="fifo", batch_max=8))
        first, second = queue.add(0.0), queue.add(0.1)
        (taken,) = queue.take(0.2)
        assert taken is first
        play(queue, first, 0.5, audio_s=3.0)
        assert queue.take(0.5) == [first]  # not the second, whose first audio waits since 0.1
        play(queue, first, 0.8, audio_s=3.0)
        assert queue.take(0.8) == [first]
        queue.finished(first, 1.1, 3.0, more=False)
        assert queue.take(1.1) == [second]

    def test_edf_serves_a_new_request_before_a_stream_that_still_plays(self) -> None:
        queue = SegmentQueue(EDF)
        playing = queue.add(0.0)
        queue.take(0.0)
        play(queue, playing, 0.2, audio_s=3.0)  # its player runs dry at 3.2
        newcomer = queue.add(0.3)
        assert queue.take(0.3) == [newcomer]
        assert queue.take(0.4) == [playing]

    def test_edf_orders_playing_streams_by_when_their_players_run_dry(self) -> None:
        queue = SegmentQueue(EDF)
        long_audio, short_audio = queue.add(0.0), queue.add(0.0)
        assert queue.take(0.0) == [long_audio]
        assert queue.take(0.1) == [short_audio]
        play(queue, long_audio, 0.1, audio_s=5.0)  # dry at 5.1
        play(queue, short_audio, 0.2, audio_s=1.0)  # dry at 1.2
        assert [queue.take(0.3), queue.take(0.4)] == [[short_audio], [long_audio]]

    def test_the_deadline_keeps_the_margin_and_one_forward_ahead_of_the_dry_player(self) -> None:
        queue = SegmentQueue(Policy(mode="edf", margin_s=0.25))
        queue.record_run(0.4)
        stream = queue.add(0.0)
        queue.take(0.0)
        play(queue, stream, 1.0, audio_s=2.0)
        assert stream.dry_at == pytest.approx(3.0)
        assert stream.due_at == pytest.approx(3.0 - 0.25 - 0.4)

    def test_ties_go_to_the_earlier_arrival(self) -> None:
        queue = SegmentQueue(EDF)
        first, second = queue.add(1.0), queue.add(1.0)
        assert [queue.take(1.0), queue.take(1.0)] == [[first], [second]]


class TestStarvationBound:
    def _run_with_arrivals(self, max_wait_s: float) -> float:
        """A stream with 100 s of slack waits while a new request arrives every 0.1 s; when
        does it run?"""
        queue = SegmentQueue(Policy(mode="edf", margin_s=0.0, max_wait_s=max_wait_s))
        started = queue.add(0.0)
        queue.take(0.0)
        play(queue, started, 0.0, audio_s=100.0)
        now = 0.0
        while now < 50.0:
            now = round(now + 0.1, 6)
            queue.add(now)
            (taken,) = queue.take(now)
            if taken is started:
                return now
            queue.finished(taken, now, 1.0, more=False)
        return float("inf")

    def test_a_started_stream_runs_within_the_bound_while_new_requests_keep_coming(self) -> None:
        ran_at = self._run_with_arrivals(max_wait_s=2.0)
        assert 2.0 <= ran_at <= 2.0 + 0.1 + 1e-9
        assert self._run_with_arrivals(max_wait_s=1000.0) == float("inf")

    def test_the_wait_is_recorded_per_segment(self) -> None:
        queue = SegmentQueue(EDF)
        stream = queue.add(0.0)
        queue.take(0.25)
        play(queue, stream, 1.0, audio_s=1.0)
        queue.take(1.5)
        assert stream.waits_s == pytest.approx([0.25, 0.5])


class TestBatching:
    def test_segments_due_within_the_window_share_a_forward_up_to_the_batch_size(self) -> None:
        queue = SegmentQueue(Policy(mode="edf", batch_max=3, batch_window_s=0.5, margin_s=0.0))
        streams = [queue.add(0.0) for _ in range(5)]
        assert len(queue.take(0.0)) == 3
        rest = queue.take(0.0)
        assert rest == streams[3:]
        for stream, dry in zip(streams[:3], (1.0, 1.4, 2.0), strict=True):
            play(queue, stream, 0.0, audio_s=dry)
        assert queue.take(0.1) == streams[:2]  # 2.0 is beyond 1.0 + 0.5
        assert queue.take(0.1) == [streams[2]]

    def test_fifo_never_batches(self) -> None:
        queue = SegmentQueue(Policy(mode="fifo", batch_max=4))
        for _ in range(3):
            queue.add(0.0)
        assert len(queue.take(0.0)) == 1

    def test_a_worker_holds_a_batch_open_only_within_the_wait_and_the_deadline(self) -> None:
        policy = Policy(mode="edf", batch_max=4, batch_wait_s=0.05, margin_s=0.0)
        queue = SegmentQueue(policy)
        assert queue.hold_s(0.0) == 0.0  # nothing waits
        newcomer = queue.add(0.0)
        assert queue.hold_s(0.0) == 0.0  # a first segment is due at once
        queue.take(0.0)
        play(queue, newcomer, 0.0, audio_s=2.0)
        assert queue.hold_s(0.1) == pytest.approx(0.05)
        assert queue.hold_s(1.98) == pytest.approx(0.02)  # never past its deadline
        for _ in range(3):
            queue.add(1.0)
        assert queue.hold_s(1.0) == 0.0  # full
        assert SegmentQueue(Policy(mode="edf", batch_max=4)).hold_s(0.0) == 0.0  # no wait set


class TestCancellation:
    def test_a_cancelled_stream_gives_its_batch_place_to_the_next(self) -> None:
        queue = SegmentQueue(Policy(mode="edf", batch_max=2))
        first, gone, third = queue.add(0.0), queue.add(0.0), queue.add(0.0)
        assert queue.remove(gone)
        assert gone not in queue
        assert queue.take(0.0) == [first, third]
        assert not queue.remove(gone)


class TestDeadlineMisses:
    def test_a_segment_after_the_player_ran_dry_is_a_miss_and_the_player_resumes(self) -> None:
        queue = SegmentQueue(EDF)
        stream = queue.add(0.0)
        queue.take(0.0)
        assert not queue.finished(stream, 0.5, 1.0, more=True)  # first audio: no deadline yet
        queue.take(0.6)
        assert not queue.finished(stream, 1.4, 1.0, more=True)  # dry at 1.5: in time
        queue.take(1.5)
        assert queue.finished(stream, 3.0, 1.0, more=False)  # dry at 2.5: late
        assert stream.misses == 1
        assert stream.dry_at == pytest.approx(4.0)  # the stalled player resumed at 3.0


def test_policy_from_settings() -> None:
    settings = Settings(
        scheduler="edf",
        batch_max=8,
        batch_wait_ms=5,
        batch_window_ms=300,
        deadline_margin_ms=100,
        max_wait_ms=1500,
    )
    assert Policy.from_settings(settings) == Policy(
        mode="edf",
        batch_max=8,
        batch_wait_s=0.005,
        batch_window_s=0.3,
        margin_s=0.1,
        max_wait_s=1.5,
    )
    assert Policy.from_settings(Settings()).largest_batch == 1


def _request(request_id: str) -> SynthesisRequest:
    return SynthesisRequest(request_id=request_id, text="Hello there. How are you?")


class TestExecutor:
    """The workers around the queue: real threads, a fake engine the test holds."""

    def test_a_job_cancelled_while_waiting_ends_at_once_and_never_runs(self) -> None:
        hold = threading.Event()
        engine = FakeEngine(segments=2, hold=hold)

        async def scenario() -> None:
            executor = InferenceExecutor(1, Policy(mode="edf"))
            try:
                busy = executor.submit(engine, _request("busy"))
                waiting = executor.submit(engine, _request("waiting"))
                await until(lambda: engine.batches, "the worker taking up the busy job")
                waiting.cancel()
                with pytest.raises(SynthesisCancelled):
                    await asyncio.wait_for(waiting.next_chunk(), WAIT_S)
                assert executor.pending == 1
                hold.set()
                chunks = [chunk async for chunk in busy.chunks()]
                assert len(chunks) == 2
            finally:
                executor.shutdown()

        asyncio.run(scenario())
        assert "waiting" not in engine.produced
        assert "waiting" not in engine.started

    def test_waiting_segments_run_as_one_forward(self) -> None:
        hold = threading.Event()
        engine = FakeEngine(segments=1, hold=hold)

        async def scenario() -> list[list[np.ndarray]]:
            executor = InferenceExecutor(1, Policy(mode="edf", batch_max=4))
            try:
                first = executor.submit(engine, _request("first"))
                await until(lambda: engine.batches, "the worker holding first in the engine")
                others = [executor.submit(engine, _request(f"r{i}")) for i in range(3)]
                hold.set()
                return [[c async for c in job.chunks()] for job in (first, *others)]
            finally:
                executor.shutdown()

        results = asyncio.run(scenario())
        assert [len(chunks) for chunks in results] == [1, 1, 1, 1]
        assert engine.batches == [1, 3]

    def test_the_planted_fault_garbles_batched_audio_only(self) -> None:
        """FAULT_GARBLE_BATCHES: a segment computed alone is as the engine made it; one computed
        in a batch of several comes out backwards (same length and samples)."""

        class RampEngine(FakeEngine):
            def synthesize(self, batch: Sequence[tuple[str, int]]) -> list[np.ndarray]:
                made = super().synthesize(batch)
                return [np.arange(out.size, dtype=np.float32) for out in made]

        hold = threading.Event()
        engine = RampEngine(segments=1, hold=hold, samples=8)

        async def scenario() -> list[np.ndarray]:
            executor = InferenceExecutor(1, Policy(mode="edf", batch_max=4), garble_batches=True)
            try:
                first = executor.submit(engine, _request("first"))
                await asyncio.sleep(0.05)  # the worker holds "first" in the engine, alone
                others = [executor.submit(engine, _request(f"r{i}")) for i in range(2)]
                hold.set()
                return [c for job in (first, *others) async for c in job.chunks()]
            finally:
                executor.shutdown()

        alone, *batched = asyncio.run(scenario())
        assert engine.batches == [1, 2]
        assert alone.tolist() == list(range(8))
        assert [b.tolist() for b in batched] == [list(range(7, -1, -1))] * 2
        assert Settings.from_env({"FAULT_GARBLE_BATCHES": "1"}).fault_garble_batches
        assert not Settings.from_env({}).fault_garble_batches
        with pytest.raises(SettingsError, match="FAULT_GARBLE_BATCHES must be 1 or 0"):
            Settings.from_env({"FAULT_GARBLE_BATCHES": "maybe"})

    def test_metric_values_per_segment(self) -> None:
        engine = FakeEngine(segments=3)

        async def scenario() -> dict[str, object]:
            executor = InferenceExecutor(1, Policy(mode="edf"))
            try:
                job = executor.submit(engine, _request("m"))
                assert len([c async for c in job.chunks()]) == 3
                return job.metric_values()
            finally:
                executor.shutdown()

        values = asyncio.run(scenario())
        assert values["batch_sizes"] == [1, 1, 1]
        assert len(values["segment_waits_s"]) == 3  # type: ignore[arg-type]
        assert values["deadline_misses"] == 0
        assert values["queue_wait_s"] is not None
