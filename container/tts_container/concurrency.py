"""Synthesis off the event loop: the segment scheduler's workers and one `SynthesisJob` per request.

`InferenceExecutor` owns the model's worker threads (``inference_workers`` of them). A request is
a job whose segments wait in the scheduler's queue (`tts_container.scheduler`); a worker takes
the next batch by the policy (fifo or edf), runs it as one forward, hands each job its audio
(its edge silence trimmed: `tts_container.trim`) through an asyncio queue, and puts the job's
next segment back in the queue. A job cancelled while its segment waits leaves the queue at once
(its batch place is free for the next forward); one cancelled while its segment runs stops there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from tts_container.engine import Engine, Samples
from tts_container.request import SynthesisRequest
from tts_container.scheduler import Policy, SegmentQueue, Stream
from tts_container.trim import for_stream

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class SynthesisFailed(RuntimeError):
    """The engine raised while synthesizing."""


class SynthesisCancelled(RuntimeError):
    """The job was cancelled before it finished (client gone, or shutdown)."""


@dataclass
class JobTimes:
    """perf_counter readings; None where the job never got there."""

    submitted: float
    started: float | None = None
    first_chunk: float | None = None
    finished: float | None = None

    @property
    def queue_wait_s(self) -> float | None:
        return None if self.started is None else self.started - self.submitted

    @property
    def first_chunk_s(self) -> float | None:
        """From the start of synthesis (after the queue wait) to the first audio chunk ready."""
        if self.started is None or self.first_chunk is None:
            return None
        return self.first_chunk - self.started


class _End:
    pass


_END = _End()


class SynthesisJob:
    """One request's synthesis: segments run by the executor's workers, ``chunks()`` on the loop."""

    def __init__(
        self,
        engine: Engine,
        request: SynthesisRequest,
        loop: asyncio.AbstractEventLoop,
        stream: Stream,
        on_cancel: Callable[[SynthesisJob], None],
    ) -> None:
        self.engine = engine
        self.request = request
        self.stream = stream
        self.times = JobTimes(submitted=stream.arrived_at)
        self.batch_sizes: list[int] = []
        self._loop = loop
        self._on_cancel = on_cancel
        self._items: asyncio.Queue[Samples | BaseException | _End] = asyncio.Queue()
        self._cancelled = threading.Event()
        self._ended = False
        # Advanced by one worker at a time: the one running the job's segment.
        self._pieces: Iterator[Any] | None = None
        self.piece: Any = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Leave the queue at once if the next segment waits; else stop after the running one."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._on_cancel(self)

    def metric_values(self) -> dict[str, Any]:
        """The job's timings for its metrics line."""
        return {
            "queue_wait_s": self.times.queue_wait_s,
            "first_chunk_s": self.times.first_chunk_s,
            "segment_waits_s": list(self.stream.waits_s),
            "batch_sizes": list(self.batch_sizes),
            "deadline_misses": self.stream.misses if self.stream.segments else None,
        }

    def deliver(self, item: Samples | BaseException | _End) -> None:
        # a closed event loop raises RuntimeError: nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)

    def advance(self) -> bool:
        """Prepare the next segment (a worker thread); False when the request has no more."""
        if self._pieces is None:
            self._pieces = iter(self.engine.pieces(self.request))
        self.piece = next(self._pieces, None)
        return self.piece is not None

    def end(self, outcome: BaseException | None, now: float) -> None:
        """Close the pieces and tell the event loop; once (a worker, or the canceller)."""
        if self._ended:
            return
        self._ended = True
        self.times.finished = now
        self.piece = None
        close = getattr(self._pieces, "close", None)
        if close is not None:
            with contextlib.suppress(ValueError):  # a generator still running elsewhere
                close()
        if outcome is None and self.cancelled:
            outcome = SynthesisCancelled(f"request {self.request.request_id} was cancelled")
        if outcome is not None:
            self.deliver(outcome)
        self.deliver(_END)

    async def next_chunk(self) -> Samples | None:
        """The next audio chunk, or None at the end.

        Raises `SynthesisFailed` if the engine raised, `SynthesisCancelled` if the job was
        cancelled.
        """
        item = await self._items.get()
        if isinstance(item, _End):
            self._items.put_nowait(item)  # later calls see the end too
            return None
        if isinstance(item, SynthesisCancelled):
            raise item
        if isinstance(item, BaseException):
            raise SynthesisFailed(f"{type(item).__name__}: {item}") from item
        return item

    async def chunks(self) -> AsyncIterator[Samples]:
        while (chunk := await self.next_chunk()) is not None:
            yield chunk


class InferenceExecutor:
    """The model's worker threads and the segment queue they share.

    Every queue operation runs under one condition variable; forwards and G2P run outside it.
    """

    def __init__(
        self,
        workers: int,
        policy: Policy | None = None,
        *,
        clock: Clock = time.perf_counter,
        garble_batches: bool = False,
    ) -> None:
        self.workers = workers
        self.policy = policy or Policy()
        self._clock = clock
        # The planted fault FAULT_GARBLE_BATCHES (settings.py): batched audio played backwards.
        self.garble_batches = garble_batches
        self._queue = SegmentQueue(self.policy)
        self._cond = threading.Condition()
        self._by_stream: dict[Stream, SynthesisJob] = {}
        self._tasks: list[list[Callable[[], None]]] = [[] for _ in range(workers)]
        self._closed = False
        self._threads = [
            threading.Thread(
                target=self._work, args=(index,), name=f"tts-inference-{index}", daemon=True
            )
            for index in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, engine: Engine, request: SynthesisRequest) -> SynthesisJob:
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._closed:
                raise RuntimeError("the inference executor is shut down")
            stream = self._queue.add(self._clock())
            job = SynthesisJob(engine, request, loop, stream, self._cancel)
            self._by_stream[stream] = job
            self._cond.notify()
        return job

    def _cancel(self, job: SynthesisJob) -> None:
        with self._cond:
            waiting = self._queue.remove(job.stream)
            if waiting:
                self._by_stream.pop(job.stream, None)
        if waiting:  # no worker holds it: end it here, at once
            job.end(None, self._clock())

    def run_on_every_worker(self, task: Callable[[], object], timeout_s: float = 600.0) -> None:
        """Run ``task`` once on each worker thread (warm-up: torch keeps per-thread state).

        Blocks the calling thread (not the event loop) until every run is done.
        """
        futures: list[Future[None]] = []
        with self._cond:
            for inbox in self._tasks:
                future: Future[None] = Future()
                futures.append(future)
                inbox.append(_as_task(task, future))
            self._cond.notify_all()
        for future in futures:
            future.result(timeout_s)

    @property
    def pending(self) -> int:
        """Jobs not yet ended (waiting or running)."""
        with self._cond:
            return len(self._by_stream)

    def shutdown(self) -> None:
        """Cancel every job (running ones stop after their segment) and stop taking new ones."""
        with self._cond:
            self._closed = True
            jobs = list(self._by_stream.values())
            self._cond.notify_all()
        for job in jobs:
            job.cancel()

    def _work(self, index: int) -> None:
        while True:
            with self._cond:
                work = self._next_work(index)
                if work is None:
                    return
                jobs = [] if callable(work) else [self._by_stream[stream] for stream in work]
            if callable(work):
                work()
            else:
                self._run(jobs)

    def _next_work(self, index: int) -> list[Stream] | Callable[[], None] | None:
        """Under the lock: a task for this worker, the next batch, or None to stop."""
        hold_until: float | None = None
        while True:
            if self._tasks[index]:
                return self._tasks[index].pop(0)
            if self._closed:
                return None
            if not len(self._queue):
                self._cond.wait()
                continue
            now = self._clock()
            hold = self._queue.hold_s(now)
            if hold_until is None:
                hold_until = now + hold
            hold = min(hold, hold_until - now)
            if hold <= 0:
                return self._queue.take(now)
            self._cond.wait(hold)

    def _run(self, jobs: list[SynthesisJob]) -> None:
        started = self._clock()
        ready: list[SynthesisJob] = []
        for job in jobs:
            if job.times.started is None:
                job.times.started = started
            if job.cancelled:
                self._finish(job, None)
            elif job.piece is not None or self._prepare(job):
                ready.append(job)
        for _, group in groupby(ready, key=lambda job: id(job.engine)):
            self._forward(list(group))

    def _prepare(self, job: SynthesisJob) -> bool:
        """The job's first piece; a job with none, or whose preparation failed, ends here."""
        try:
            if job.advance():
                return True
            self._finish(job, None)
        except Exception as exc:
            log.exception("preparing request %s failed", job.request.request_id)
            self._finish(job, exc)
        return False

    def _forward(self, jobs: list[SynthesisJob]) -> None:
        """One forward for ``jobs``: every job's audio out first, then their next segments in."""
        began = self._clock()
        try:
            engine = jobs[0].engine
            audios = engine.synthesize([job.piece for job in jobs])
            if len(audios) != len(jobs):
                raise RuntimeError(f"the engine returned {len(audios)} outputs for {len(jobs)}")
            audios = [
                for_stream(samples, job.piece, engine.sample_rate)
                for job, samples in zip(jobs, audios, strict=True)
            ]
            if self.garble_batches and len(jobs) > 1:
                audios = [samples[..., ::-1].copy() for samples in audios]
        except Exception as exc:
            log.exception(
                "synthesis failed for %s", ", ".join(job.request.request_id for job in jobs)
            )
            for job in jobs:
                self._finish(job, exc)
            return
        done = self._clock()
        with self._cond:
            self._queue.record_run(done - began)
        playing = []
        for job, samples in zip(jobs, audios, strict=True):
            if job.cancelled:
                self._finish(job, None)
                continue
            if samples.size:
                if job.times.first_chunk is None:
                    job.times.first_chunk = done
                job.deliver(samples)
            job.batch_sizes.append(len(jobs))
            playing.append((job, samples.shape[-1] / job.engine.sample_rate if samples.size else 0))
        for job, audio_s in playing:
            outcome: BaseException | None = None
            try:
                more = job.advance()
            except Exception as exc:
                log.exception("preparing request %s failed", job.request.request_id)
                more, outcome = False, exc
            with self._cond:
                more = more and not job.cancelled and not self._closed
                self._queue.finished(job.stream, done, audio_s, more)
                if more:
                    self._cond.notify()
            if not more:
                self._finish(job, outcome)

    def _finish(self, job: SynthesisJob, outcome: BaseException | None) -> None:
        with self._cond:
            self._by_stream.pop(job.stream, None)
        job.end(outcome, self._clock())


def _as_task(task: Callable[[], object], future: Future[None]) -> Callable[[], None]:
    def run() -> None:
        try:
            task()
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)

    return run
