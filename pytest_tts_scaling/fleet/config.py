"""What one process of `tts-bench load` runs: sent by the master to each worker as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S
from pytest_tts_scaling.load.workload import Workload, workload_for
from pytest_tts_scaling.options import RunOptions


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
    options: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = INVOCATION_LIMIT_S
    label: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoadConfig:
        return cls(**data)

    def workload(self) -> Workload:
        options = RunOptions.from_namespace(self.options)
        return workload_for(options, self.kind)
