"""The endpoint handle: what is measured, how to reach it, and how to hold its capacity still.

Three kinds share one interface: a local container the plugin starts, any URL speaking the
container's contract, and a SageMaker endpoint (`pytest_tts_scaling.endpoints.sagemaker`).
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from pytest_tts_scaling.core.schema import DeployedConfig, Host, Rung
from pytest_tts_scaling.load.host import (
    CoreSplit,
    cpu_model,
    gpu_name,
    hardware_label,
    load_average,
    usable_cores,
)
from pytest_tts_scaling.load.transports import INVOCATION_LIMIT_S, Transport

# A health check answers at once or not at all.
PING_TIMEOUT_S = 5.0


class Endpoint(abc.ABC):
    """One endpoint under measurement."""

    kind: str
    name: str
    deployed: DeployedConfig
    slug: str
    # How long one request may take, the first one included (SageMaker's invocation limit).
    invocation_limit_s: float = INVOCATION_LIMIT_S

    @abc.abstractmethod
    def transport(self, name: str, *, concurrency: int) -> Transport:
        """A transport of the given kind (`response-stream` or `bidi`) sized for N workers."""

    def ping_words(self) -> str | None:
        """Whether the endpoint's health check answers, in words; None where it cannot be asked."""
        return None

    def instance_count(self) -> int | None:
        """Instances serving now, where the platform says; None where it cannot be known."""
        return None

    @contextlib.contextmanager
    def frozen(self) -> Iterator[Endpoint]:
        """Hold capacity at one instance for the measurement; restore on every exit path."""
        yield self

    def thaw(self) -> None:  # noqa: B027 - nothing to release unless frozen() pins capacity
        """End :meth:`frozen`'s hold now (the load has stopped); its exit then has nothing left."""

    def annotate_rungs(self, rungs: list[Rung]) -> list[Rung]:
        """After the ladder, attach server-side views of each rung (SageMaker: CloudWatch)."""
        return rungs

    def host(self) -> Host | None:
        """The machine the endpoint runs on, where it is this one (a local endpoint)."""
        return None

    @property
    def frozen_capacity(self) -> bool:
        """Whether :meth:`frozen` really pins capacity; a local or URL endpoint has none to pin."""
        return False

    @property
    def queue_max_depth(self) -> int | None:
        """The admission bound: as deployed, or as the endpoint's own 503 answers named it
        (the lower where both are known); None when unbounded or unknown."""
        known = [b for b in (self._deployed_queue_max_depth, self.observed_queue_max_depth) if b]
        return min(known) if known else None

    # `max_queue_depth` from the endpoint's own 503 answers, and where it was first seen.
    observed_queue_max_depth: int | None = None
    observed_queue_max_depth_at: str | None = None

    def observe_queue_max_depth(self, bound: int, where: str) -> None:
        """Learn the admission bound from a 503 answer's body (docs/container.md), e.g. during a
        rung."""
        if self.observed_queue_max_depth is None or bound < self.observed_queue_max_depth:
            self.observed_queue_max_depth = bound
            self.observed_queue_max_depth_at = where

    @property
    def queue_max_depth_source(self) -> str | None:
        """Where :attr:`queue_max_depth` comes from, in words for the report."""
        bound = self.queue_max_depth
        if bound is None:
            return None
        if bound == self._deployed_queue_max_depth:
            return "QUEUE_MAX_DEPTH in the deployed container environment"
        return f"max_queue_depth in the endpoint's 503 answer {self.observed_queue_max_depth_at}"

    @property
    def _deployed_queue_max_depth(self) -> int | None:
        raw = self.deployed.container_env.get("QUEUE_MAX_DEPTH", "")
        return int(raw) if raw.strip().isdigit() and int(raw) > 0 else None


class UrlEndpoint(Endpoint):
    """Any endpoint speaking the container's HTTP contract at a base URL."""

    kind = "url"
    # Where the served model's files are, when this machine knows (a local endpoint).
    model_dir: Path | None = None

    def __init__(
        self,
        base_url: str,
        *,
        deployed: DeployedConfig | None = None,
        slug: str = "",
        invocation_limit_s: float = INVOCATION_LIMIT_S,
    ):
        self.base_url = base_url.rstrip("/")
        self.invocation_limit_s = invocation_limit_s
        self.name = self.base_url
        self.deployed = deployed or DeployedConfig(
            instance_type="unknown", image_digest="unknown", container_env={}
        )
        self.slug = slug or "url-" + hashlib.sha256(self.base_url.encode()).hexdigest()[:8]

    def transport(self, name: str, *, concurrency: int) -> Transport:
        if name == "bidi":
            from pytest_tts_scaling.load.transports.websocket import WebSocketTransport

            return WebSocketTransport(self.base_url, timeout_s=self.invocation_limit_s)
        from pytest_tts_scaling.load.transports.http import HttpStreamTransport

        return HttpStreamTransport(self.base_url, timeout_s=self.invocation_limit_s)

    def ping_words(self) -> str:
        """`GET /ping` once, as the container's contract has it: answered, with what, or not."""
        import httpx

        try:
            answer = httpx.get(f"{self.base_url}/ping", timeout=PING_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return f"/ping did not answer within {PING_TIMEOUT_S:g} s either ({type(exc).__name__})"
        return f"/ping answered HTTP {answer.status_code} at once"


class LocalEndpoint(UrlEndpoint):
    """The container's server started by the plugin on this machine (the local default)."""

    kind = "local"

    def __init__(
        self,
        base_url: str,
        *,
        model_dir: Path | None,
        container_env: dict[str, str],
        cores: CoreSplit | None = None,
        weights: str | None = None,
    ):
        digest = local_fingerprint(model_dir, container_env.get("WEIGHTS", "trained"))
        if model_dir is not None:  # real weights: the artifact says which, and is not "untrained"
            container_env = {**container_env, "MODEL_DIR": str(model_dir)}
        super().__init__(
            base_url,
            deployed=DeployedConfig(
                instance_type="local",
                image_digest=f"sha256:{digest}",
                container_env=container_env,
                weights=weights,
            ),
            slug=f"local-{digest[:8]}",
        )
        self.name = "local"
        self.model_dir = model_dir
        self.cores = cores

    def host(self) -> Host:
        cores = self.cores
        return Host(
            cpu_model=cpu_model(),
            cpu_count=len(usable_cores()),
            gpu=gpu_name(),
            load_avg_1m=load_average(),
            server_cores=list(cores.server) if cores else [],
            client_cores=list(cores.client) if cores else [],
            cores_shared=cores.shared if cores else True,
        )


def local_fingerprint(model_dir: Path | None, weights: str = "trained") -> str:
    """sha256 over the hardware, the server's code and the model files (the local slug,
    docs/artifacts.md#files).

    A changed model or another machine changes the slug, so a 2-core CPU run and a GPU run never
    compare silently. The trained and development models are built deterministically from the
    server's code and the weights setting, so without a model directory those identify them.
    """
    digest = hashlib.sha256(hardware_label().encode())
    digest.update(weights.encode())
    spec = importlib.util.find_spec("tts_container")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    files = sorted(
        f
        for root in roots
        for f in root.rglob("*")
        if f.is_file() and f.suffix in {".py", ".json"} and "__pycache__" not in f.parts
    )
    if model_dir is not None:
        files += sorted(f for f in Path(model_dir).rglob("*") if f.is_file())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
