"""The user's AWS configuration as botocore reads it, for the AWS clients and the SageMaker
transports alike."""

from __future__ import annotations

from typing import Any


def user_config(profile: str | None) -> Any:
    """The user's botocore configuration (environment, config file) under `profile`."""
    import botocore.session

    # boto3 names the implicit profile "default"; botocore then insists that it exists.
    return botocore.session.Session(profile=None if profile == "default" else profile)
