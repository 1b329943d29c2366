"""Synthesis off the event loop: a dedicated executor and one `SynthesisJob` per request.

The executor runs ``inference_workers`` syntheses at once; a job submitted beyond that waits in
the executor's queue (its queue wait). Audio reaches the event loop through an asyncio queue as each
segment is ready. A cancelled job (client gone, shutdown) stops between segments, and a job
cancelled while still queued never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from tts_container.engine import Engine, Samples
from tts_container.schema import SynthesisRequest

log = logging.getLogger(__name__)


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
    """One request's synthesis: ``run`` on a worker thread, ``chunks()`` on the event loop."""

    def __init__(self, engine: Engine, request: SynthesisRequest, loop: asyncio.AbstractEventLoop):
        self.engine = engine
        self.request = request
        self.times = JobTimes(submitted=time.perf_counter())
        self.segments_done = 0
        self._loop = loop
        self._items: asyncio.Queue[Samples | BaseException | _End] = asyncio.Queue()
        self._cancelled = threading.Event()
        self._future: Future[None] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop at the next segment boundary; never start if still queued."""
        self._cancelled.set()
        if self._future is not None:
            self._future.cancel()

    def _deliver(self, item: Samples | BaseException | _End) -> None:
        # a closed event loop raises RuntimeError: nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)

    def run(self) -> None:
        """Synthesize segment by segment (worker thread)."""
        self.times.started = time.perf_counter()
        outcome: BaseException | None = None
        try:
            if not self.cancelled:
                self._synthesize()
        except Exception as exc:
            if not self.cancelled:
                log.exception("synthesis failed for request %s", self.request.request_id)
            outcome = exc
        finally:
            self.times.finished = time.perf_counter()
            self._end(outcome)

    def _synthesize(self) -> None:
        segments = self.engine.synthesize_segments(self.request)
        try:
            for samples in segments:
                if samples.size:
                    if self.times.first_chunk is None:
                        self.times.first_chunk = time.perf_counter()
                    self._deliver(samples)
                self.segments_done += 1
                if self.cancelled:
                    break
        finally:
            close = getattr(segments, "close", None)
            if close is not None:
                close()

    def _end(self, outcome: BaseException | None) -> None:
        if outcome is None and self.cancelled:
            outcome = SynthesisCancelled(f"request {self.request.request_id} was cancelled")
        if outcome is not None:
            self._deliver(outcome)
        self._deliver(_END)

    def _on_done(self, future: Future[None]) -> None:
        if future.cancelled():  # cancelled while queued: run() never ran
            self._end(None)

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
    """The thread pool dedicated to synthesis; tracks its jobs so shutdown can cancel them."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tts-inference")
        self._jobs: set[SynthesisJob] = set()
        self._closed = False

    def submit(self, engine: Engine, request: SynthesisRequest) -> SynthesisJob:
        if self._closed:
            raise RuntimeError("the inference executor is shut down")
        job = SynthesisJob(engine, request, asyncio.get_running_loop())
        self._jobs.add(job)
        future = self._pool.submit(job.run)
        job._future = future
        future.add_done_callback(job._on_done)
        future.add_done_callback(lambda _: self._jobs.discard(job))
        return job

    def run_on_every_worker(self, task: Callable[[], object], timeout_s: float = 600.0) -> None:
        """Run ``task`` once on each worker thread (warm-up: torch keeps per-thread state).

        Blocks the calling thread (not the event loop) until every run is done.
        """
        barrier = threading.Barrier(self.workers)

        def on_a_worker() -> None:
            barrier.wait(timeout_s)  # holds each worker until all are taken: one run per thread
            task()

        for future in [self._pool.submit(on_a_worker) for _ in range(self.workers)]:
            future.result(timeout_s)

    @property
    def pending(self) -> int:
        return len(self._jobs)

    def shutdown(self) -> None:
        """Cancel every job (running ones stop at their next segment) and stop taking new ones."""
        self._closed = True
        for job in list(self._jobs):
            job.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
