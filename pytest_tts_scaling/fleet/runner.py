"""Locust used as a library: one process (LocalRunner), or a master and its workers.

The master owns the schedule and the records. `--processes P` starts P worker processes on this
host (as Locust's own `--processes` does); `--master` also accepts workers started on other
hosts with `tts-bench load --worker --master-host H`. Workers need no other flags: each is sent
its configuration (target, transport, workload, its share of the arrival schedule) over
Locust's custom messages, spawns its users, starts them at one wall-clock instant, and sends its
records back as they accumulate.

Messages, master to workers: `tts_config`, `tts_go` (the start instant), `tts_drain` (send
nothing new). Workers to master: `tts_configured`, `tts_records`, `tts_done`.

Importing this module imports Locust (gevent monkey-patching): only the load command does.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from pytest_tts_scaling.core.progress import Progress
from pytest_tts_scaling.fleet.config import LoadConfig
from pytest_tts_scaling.fleet.user import USER_CLASSES, ProcessState, configure, user_class
from pytest_tts_scaling.load.monitor import quiet_gc

# Users spawn and connect before this much time is up; the start instant is then this far ahead.
START_LEAD_S = 1.0
# Requests still running when the load ends get this long to finish.
DRAIN_S = 30.0
# Open loop: sends that are late may still leave this long after the schedule's last time.
LATE_GRACE_S = 30.0
WORKERS_TIMEOUT_S = 60.0
# A worker that has not answered its configuration is sent it again after this long.
CONFIG_RESEND_S = 2.0
FLUSH_EVERY_S = 1.0
POLL_S = 0.02
SPAWN_PER_PROCESS = 100


@dataclass
class LoadRun:
    """What the load sent: every record (JSONL rows) and what could not be sent."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    unsent: int = 0
    abandoned: int = 0
    processes: int = 1
    failures: list[str] = field(default_factory=list)


class WorkerSide:
    """One process's part of the load, however its messages travel."""

    def __init__(self, send: Callable[[str, dict[str, Any]], None]):
        self.send = send
        self.state: ProcessState | None = None
        self._gc = contextlib.ExitStack()

    def on_config(self, data: dict[str, Any]) -> None:
        self.state = configure(LoadConfig.from_json(data))
        self.send("tts_configured", {"index": self.state.config.worker_index})

    def on_go(self, data: dict[str, Any]) -> None:
        assert self.state is not None
        # As the qmax engine does: no full collection while bytes are being timed.
        self._gc.enter_context(quiet_gc())
        self.state.begin(int(data["start_epoch_ns"]))
        gevent.spawn(self._report)

    def on_drain(self, data: dict[str, Any]) -> None:
        if self.state is not None:
            self.state.draining = True

    def _report(self) -> None:
        """Send records every second; report done once nothing more will be sent or answered."""
        state = self.state
        assert state is not None
        last_flush = time.monotonic()
        drain_deadline: float | None = None
        while True:
            gevent.sleep(POLL_S)
            if state.finished and drain_deadline is None:
                drain_deadline = time.monotonic() + DRAIN_S
            idle = state.finished and state.in_flight == 0
            if idle or (drain_deadline is not None and time.monotonic() > drain_deadline):
                break
            if time.monotonic() - last_flush >= FLUSH_EVERY_S:
                self.send("tts_records", state.take_rows())
                last_flush = time.monotonic()
        self._gc.close()
        pacer_left = state.pacer.remaining if state.pacer is not None else 0
        self.send(
            "tts_done",
            {
                "index": state.config.worker_index,
                **state.take_rows(),
                "unsent": state.unsent + pacer_left,
                "abandoned": state.in_flight,
                "failure": state.failure,
            },
        )


class MasterSide:
    """Collects what the workers send."""

    def __init__(self) -> None:
        self.run = LoadRun()
        self.configured: set[int] = set()
        self.done: set[int] = set()

    def on_configured(self, data: dict[str, Any]) -> None:
        self.configured.add(int(data["index"]))

    def on_records(self, data: dict[str, Any]) -> None:
        self.run.rows.extend(data["rows"])
        self.run.inputs.extend(data["inputs"])

    def on_done(self, data: dict[str, Any]) -> None:
        self.on_records(data)
        self.run.unsent += int(data["unsent"])
        self.run.abandoned += int(data["abandoned"])
        if data.get("failure"):
            self.run.failures.append(f"process {data['index']}: {data['failure']}")
        self.done.add(int(data["index"]))


def _listener(handler: Callable[[dict[str, Any]], None]) -> Callable[..., None]:
    def listen(environment: Any, msg: Any, **_: Any) -> None:
        handler(msg.data or {})

    return listen


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"tts-bench load: {what} within {timeout_s:g} s")
        gevent.sleep(POLL_S)


def _quiet_locust() -> None:
    """Locust logs every spawn and connection at INFO; the command prints its own summary."""
    logging.getLogger("locust").setLevel(logging.WARNING)


def run_load(
    config: LoadConfig,
    *,
    duration_s: float,
    processes: int = 0,
    master: bool = False,
    expect_workers: int = 0,
    bind_host: str = "127.0.0.1",
    bind_port: int = 0,
    progress: Progress = print,
) -> LoadRun:
    """Run the load: in this process, or as a master of local and remote workers.

    Closed loop: `config.users` users for `duration_s`, then a drain. Open loop: the schedule in
    `config.offsets_s`, shared out arrival by arrival over the processes, to its last send.
    """
    _quiet_locust()
    if processes == 0 and not master:
        return _run_local(config, duration_s=duration_s, progress=progress)
    workers = processes + expect_workers
    if workers < 1:
        raise ValueError("a master needs workers: --processes P and/or --expect-workers K")
    return _run_master(
        config,
        duration_s=duration_s,
        processes=processes,
        workers=workers,
        bind_host=bind_host,
        bind_port=bind_port,
        progress=progress,
    )


def _end_of(config: LoadConfig, duration_s: float) -> float:
    """Seconds after the start at which nothing new is sent."""
    if config.mode == "open":
        last = max(config.offsets_s, default=0.0)
        return last + LATE_GRACE_S
    return duration_s


def _run_local(config: LoadConfig, *, duration_s: float, progress: Progress) -> LoadRun:
    master = MasterSide()
    worker = WorkerSide(
        lambda kind, data: {
            "tts_configured": master.on_configured,
            "tts_records": master.on_records,
            "tts_done": master.on_done,
        }[kind](data)
    )
    worker.on_config(config.to_json())
    env = Environment(user_classes=[user_class(config)])
    runner = env.create_local_runner()
    try:
        runner.start(config.users, spawn_rate=_spawn_rate(config, 1))
        _wait(
            lambda: runner.spawning_greenlet is None or runner.spawning_greenlet.dead, 60, "spawn"
        )
        start = time.time_ns() + int(START_LEAD_S * 1e9)
        progress(_started_line(config, 1))
        worker.on_go({"start_epoch_ns": start})
        _until_done(master, worker.on_drain, config, duration_s, start, expected=1)
    finally:
        runner.quit()
    return master.run


def _until_done(
    master: MasterSide,
    drain: Callable[[dict[str, Any]], None],
    config: LoadConfig,
    duration_s: float,
    start_epoch_ns: int,
    *,
    expected: int,
) -> None:
    """Wait out the load, drain it at its end, and wait for every process's last records."""
    end_ns = start_epoch_ns + int(_end_of(config, duration_s) * 1e9)
    while len(master.done) < expected and time.time_ns() < end_ns:
        gevent.sleep(POLL_S)
    drain({})
    _wait(lambda: len(master.done) >= expected, DRAIN_S + 15, "the workers' last records")


def _spawn_rate(config: LoadConfig, processes: int) -> int:
    """All users within a second, but no more than Locust's advised 100 a second per process."""
    return max(1, min(config.users, SPAWN_PER_PROCESS * processes))


def _started_line(config: LoadConfig, processes: int) -> str:
    what = (
        f"closed loop, {config.users} users"
        if config.mode == "closed"
        else f"open loop, {len(config.offsets_s)} scheduled sends, up to {config.users} in flight"
    )
    return f"load: {what} over {processes} process(es) against {config.target}"


def _run_master(
    config: LoadConfig,
    *,
    duration_s: float,
    processes: int,
    workers: int,
    bind_host: str,
    bind_port: int,
    progress: Progress,
) -> LoadRun:
    import numpy as np

    from pytest_tts_scaling.core.arrivals import share
    from pytest_tts_scaling.endpoints.local import free_port

    port = bind_port or free_port()
    env = Environment(user_classes=[user_class(config)])
    runner: MasterRunner = env.create_master_runner(bind_host, port)
    side = MasterSide()
    runner.register_message("tts_configured", _listener(side.on_configured))
    runner.register_message("tts_records", _listener(side.on_records))
    runner.register_message("tts_done", _listener(side.on_done))
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_tts_scaling.cli",
                "load",
                "--worker",
                "--master-host",
                "127.0.0.1" if bind_host in ("*", "0.0.0.0") else bind_host,
                "--master-port",
                str(port),
            ]
        )
        for _ in range(processes)
    ]
    if workers > processes:
        progress(f"load: master on {bind_host}:{port}, waiting for {workers} workers")
    try:
        _wait(lambda: len(runner.clients.ready) >= workers, WORKERS_TIMEOUT_S, "workers connect")
        offsets = np.asarray(config.offsets_s, dtype=float)
        configs = {
            index: (
                client_id,
                replace(
                    config,
                    worker_index=index,
                    worker_count=workers,
                    offsets_s=[float(t) for t in share(offsets, index, workers)],
                ).to_json(),
            )
            for index, client_id in enumerate(sorted(runner.clients.keys())[:workers])
        }
        _configure(runner, side, configs)
        runner.start(config.users, spawn_rate=_spawn_rate(config, workers))
        _wait(lambda: runner.spawning_completed, 120, "users spawn")
        start = time.time_ns() + int(START_LEAD_S * 1e9)
        side.run.processes = workers
        progress(_started_line(config, workers))
        runner.send_message("tts_go", {"start_epoch_ns": start})
        _until_done(
            side,
            lambda data: runner.send_message("tts_drain", data),
            config,
            duration_s,
            start,
            expected=workers,
        )
    finally:
        runner.quit()
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=5)
    return side.run


def _configure(
    runner: MasterRunner, side: MasterSide, configs: dict[int, tuple[str, dict[str, Any]]]
) -> None:
    """Send each worker its part until it says configured. A worker registers its handlers just
    after it tells the master it is ready, so a config that arrives in between is dropped
    ("Unknown message type"); on a busy host that happens, and the worker is asked again."""
    deadline = time.monotonic() + WORKERS_TIMEOUT_S
    while len(side.configured) < len(configs):
        if time.monotonic() > deadline:
            raise RuntimeError(f"tts-bench load: workers configure within {WORKERS_TIMEOUT_S:g} s")
        for index, (client_id, data) in configs.items():
            if index not in side.configured:
                runner.send_message("tts_config", data, client_id=client_id)
        _wait_up_to(lambda: len(side.configured) >= len(configs), CONFIG_RESEND_S)


def _wait_up_to(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        gevent.sleep(POLL_S)


def run_worker(master_host: str, master_port: int) -> int:
    """Serve a master until it quits: configuration, users and records all come from it."""
    _quiet_locust()
    env = Environment(user_classes=list(USER_CLASSES))
    runner: WorkerRunner = env.create_worker_runner(master_host, master_port)
    side = WorkerSide(lambda kind, data: runner.send_message(kind, data))
    runner.register_message("tts_config", _listener(side.on_config))
    runner.register_message("tts_go", _listener(side.on_go))
    runner.register_message("tts_drain", _listener(side.on_drain))
    runner.greenlet.join()
    return 0
