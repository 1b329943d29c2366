"""What one process of `tts-bench load` runs: sent by the master to each worker as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_tts_scaling.core.defaults import DEFAULT_MODEL
from pytest_tts_scaling.load.scenario import load_scenario
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S
from pytest_tts_scaling.load.workload import Workload, workload_for


@dataclass
class LoadConfig:
    """The target, the transport, the loop and this process's share of the schedule."""

    target: str
    transport: str = "response-stream"
    kind: str = "url"  # "url" or "sagemaker"
    mode: str = "closed"  # "closed": --users N; "open": the schedule in `offsets_s`
    users: int = 1
    offsets_s: list[float] = field(default_factory=list)
    worker_index: int = 0
    worker_count: int = 1
    # The workload: the scenario file (a resolved path: workers may start elsewhere), the model
    # named in requests and the inference component they name.
    scenario: str | None = None
    model: str = DEFAULT_MODEL
    component: str | None = None
    timeout_s: float = INVOCATION_LIMIT_S
    label: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoadConfig:
        return cls(**data)

    def workload(self) -> Workload:
        return workload_for(
            load_scenario(Path(self.scenario)) if self.scenario else None,
            model=self.model,
            component=self.component,
            transport=self.transport,
            endpoint_kind=self.kind,
        )
