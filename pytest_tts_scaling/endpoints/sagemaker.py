"""The SageMaker endpoint handle: fingerprint, transports, freeze and the CloudWatch join.

With `--inference-component NAME` the handle measures that component: requests name it, freeze
pins its copies, capacity is its copy count and the CloudWatch join reads ConcurrentRequestsPerCopy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsClients, aws_errors
from pytest_tts_scaling.aws.fingerprint import (
    Deployment,
    component_state,
    describe_component,
    describe_endpoint,
    read_deployment,
    variant_states,
)
from pytest_tts_scaling.aws.scaling import ScalingScope
from pytest_tts_scaling.core.schema import Rung
from pytest_tts_scaling.core.spelling import both_flags
from pytest_tts_scaling.endpoints.base import Endpoint
from pytest_tts_scaling.endpoints.target import EndpointTarget
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.transports import Transport

Log = Callable[[str], None]


class SageMakerEndpoint(Endpoint):
    kind = "sagemaker"

    def __init__(
        self,
        deployment: Deployment,
        *,
        clients: AwsClients,
        artifacts_dir: Path,
        log: Log,
        force: bool = False,
    ):
        self.deployment = deployment
        self.name = deployment.endpoint
        self.variant = deployment.variant
        self.inference_component = deployment.component
        self.deployed = deployment.deployed_config()
        self.slug = deployment.slug
        self.clients = clients
        self.artifacts_dir = Path(artifacts_dir)
        self.log = log
        self.force = force
        self._release: contextlib.ExitStack | None = None

    @property
    def scope(self) -> ScalingScope:
        return ScalingScope(self.name, self.variant, self.inference_component)

    def transport(self, name: str, *, concurrency: int) -> Transport:
        if name == "bidi" and self.inference_component:
            raise InputError(
                f"{both_flags('--transport')} bidi cannot target inference component "
                f"{self.inference_component}: InvokeEndpointWithBidirectionalStream has no "
                "InferenceComponentName; expected response-stream"
            )
        if name == "bidi":
            from pytest_tts_scaling.load.transports.sagemaker_bidi import SageMakerBidiTransport

            return SageMakerBidiTransport(self.name, variant=self.variant)
        if name != "response-stream":
            raise ValueError(f"unknown transport {name!r}: expected response-stream or bidi")
        from pytest_tts_scaling.load.transports.sagemaker_stream import SageMakerStreamTransport

        return SageMakerStreamTransport(self.name, concurrency=concurrency, variant=self.variant)

    def instance_count(self) -> int | None:
        """Instances of the variant; copies when an inference component is measured."""
        if self.inference_component:
            with aws_errors():
                found = describe_component(self.clients.sagemaker, self.inference_component)
            return None if found is None else component_state(found).current_copy_count
        with aws_errors():
            description = describe_endpoint(self.clients.sagemaker, self.name)
        if description is None:
            return None
        state = next((v for v in variant_states(description) if v.name == self.variant), None)
        return None if state is None else state.current_instance_count

    @contextlib.contextmanager
    def frozen(self) -> Iterator[Endpoint]:
        """Frozen for the block; :meth:`thaw` may end the freeze earlier (the exit is a no-op)."""
        from pytest_tts_scaling.aws.lifecycle.freeze import freeze

        with contextlib.ExitStack() as stack:
            stack.enter_context(
                freeze(
                    self.clients,
                    self.name,
                    artifacts_dir=self.artifacts_dir,
                    log=self.log,
                    component=self.inference_component,
                    force=self.force,
                )
            )
            self._release = stack
            try:
                yield self
            finally:
                self._release = None

    def thaw(self) -> None:
        """Restore scaling and capacity now, once the load has stopped, ahead of the block's end."""
        release, self._release = self._release, None
        if release is not None:
            release.close()

    @property
    def frozen_capacity(self) -> bool:
        return True

    def annotate_rungs(self, rungs: list[Rung]) -> list[Rung]:
        from pytest_tts_scaling.aws.cloudwatch import annotate_rungs

        return annotate_rungs(
            self.clients.cloudwatch,
            rungs,
            endpoint=self.name,
            variant=self.variant,
            component=self.inference_component,
            clock=self.clients.clock,
            log=self.log,
        )


@contextlib.contextmanager
def open_sagemaker_endpoint(
    target: EndpointTarget, *, log: Log, clients: AwsClients | None = None
) -> Iterator[SageMakerEndpoint]:
    """The endpoint named by `--endpoint`, read once; clients follow boto3's standard chain."""
    if not target.endpoint:
        raise ValueError("open_sagemaker_endpoint needs target.endpoint")
    clients = clients or AwsClients()
    deployment = read_deployment(clients.sagemaker, target.endpoint, target.inference_component)
    component = f" (inference component {deployment.component})" if deployment.component else ""
    log(
        f"{deployment.endpoint}{component}: {deployment.instance_type}, image "
        f"{deployment.image_digest}, slug {deployment.slug}, status {deployment.status}"
    )
    yield SageMakerEndpoint(
        deployment,
        clients=clients,
        artifacts_dir=target.artifacts_dir,
        log=log,
        force=target.force,
    )
