"""What the app shares between its lifespan, its endpoints and the server runner."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tts_container.concurrency import InferenceExecutor
from tts_container.drain import Drain
from tts_container.engine import Engine
from tts_container.gate import InFlight
from tts_container.metrics import MetricsLog
from tts_container.settings import Settings

EngineFactory = Callable[[Settings], Engine]


@dataclass
class AppState:
    settings: Settings
    in_flight: InFlight
    metrics: MetricsLog
    engine_factory: EngineFactory
    engine: Engine | None = None
    executor: InferenceExecutor | None = None
    # starting -> loading -> ready, or -> failed; the loader thread moves it forward
    phase: str = "starting"
    # set when the lifespan shuts down (a load still running then is abandoned, not failed)
    stopping: bool = False
    load_error: str | None = None
    loader: threading.Thread | None = None
    ready_event: threading.Event = field(default_factory=threading.Event)
    settled_event: threading.Event = field(default_factory=threading.Event)
    # what SIGTERM starts: no more admissions, in-flight streams finish or are cut
    drain: Drain = field(init=False)

    def __post_init__(self) -> None:
        self.drain = Drain(self.in_flight)

    @property
    def ready(self) -> bool:
        return self.phase == "ready"
