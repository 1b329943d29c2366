"""Open the endpoint the options name: SageMaker, a URL, or the local default."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from pytest_tts_scaling.endpoints.base import Endpoint, LocalEndpoint, UrlEndpoint
from pytest_tts_scaling.options import RunOptions


@contextlib.contextmanager
def open_endpoint(options: RunOptions, *, log: Callable[[str], None]) -> Iterator[Endpoint]:
    """Yield the endpoint handle; a local server started here is stopped on exit."""
    if options.kind == "sagemaker":
        from pytest_tts_scaling.endpoints.sagemaker import open_sagemaker_endpoint

        with open_sagemaker_endpoint(options, log=log) as endpoint:
            yield endpoint
        return
    if options.kind == "url":
        assert options.endpoint_url is not None
        yield UrlEndpoint(options.endpoint_url, invocation_limit_s=options.invocation_limit_s)
        return
    from pytest_tts_scaling.endpoints.local import LocalServer

    with (
        LocalServer(log=log, model_dir=options.model_dir) as server,
        server.cores.client_pinned(),
    ):
        yield LocalEndpoint(
            server.base_url,
            model_dir=server.model_dir,
            container_env=server.env,
            cores=server.cores,
            weights=server.weights,
        )
