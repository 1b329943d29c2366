"""Open the endpoint a target names: SageMaker, a URL, or the local default."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from pytest_tts_scaling.endpoints.base import Endpoint, LocalEndpoint, UrlEndpoint
from pytest_tts_scaling.endpoints.target import EndpointTarget


@contextlib.contextmanager
def open_endpoint(target: EndpointTarget, *, log: Callable[[str], None]) -> Iterator[Endpoint]:
    """Yield the endpoint handle; a local server started here is stopped on exit."""
    if target.kind == "sagemaker":
        from pytest_tts_scaling.endpoints.sagemaker import open_sagemaker_endpoint

        with open_sagemaker_endpoint(target, log=log) as endpoint:
            yield endpoint
        return
    if target.kind == "url":
        assert target.endpoint_url is not None
        yield UrlEndpoint(target.endpoint_url, invocation_limit_s=target.invocation_limit_s)
        return
    from pytest_tts_scaling.endpoints.local import LocalServer

    with (
        LocalServer(log=log, model_dir=target.model_dir) as server,
        server.cores.client_pinned(),
    ):
        yield LocalEndpoint(
            server.base_url,
            model_dir=server.model_dir,
            container_env=server.env,
            cores=server.cores,
            weights=server.weights,
        )
