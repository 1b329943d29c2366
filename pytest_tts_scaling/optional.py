"""Which extra brings which module: a step that needs one the user lacks ends in one line naming
the extra to install, not in a ModuleNotFoundError from deep inside.

The base install is what `pytest -m qmax --endpoint-url URL` needs; SageMaker, the Locust fleet,
plots, the local container, the word error check and MLflow are extras. Modules are imported
where they are used, so a missing one surfaces as ModuleNotFoundError there; both front doors
(tts-bench's `main`, the plugin's report hook) turn it into this line.
"""

from __future__ import annotations

import importlib.util

from pytest_tts_scaling.errors import ToolError

EXTRA_OF_MODULE = {
    "boto3": "aws",
    "botocore": "aws",
    "aioboto3": "aws",
    "aiobotocore": "aws",
    "aws_sdk_sagemaker_runtime_http2": "aws",
    "awscrt": "aws",
    "smithy_aws_core": "aws",
    "locust": "fleet",
    "gevent": "fleet",
    "geventhttpclient": "fleet",
    "websocket": "fleet",
    "matplotlib": "report",
    "tts_container": "local",
    "pocketsphinx": "quality",
    "mlflow": "mlflow",
    "sqlalchemy": "mlflow",
    "alembic": "mlflow",
}


class MissingExtra(ToolError):
    """A step needs a module of an extra that is not installed."""


def missing_extra(exc: ModuleNotFoundError) -> MissingExtra | None:
    """The one-line error for a module an extra brings; None for any other missing module."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return MissingExtra(
        f"this needs {top}, which comes with the [{extra}] extra: expected it installed "
        f"(pip install 'pytest-tts-scaling[{extra}]')"
    )


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
