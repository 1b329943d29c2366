"""AWS clients from boto3's standard configuration chain, created on first use, and the clock.

Profile, region, credentials, retries and `AWS_ENDPOINT_URL` come from boto3 alone (environment,
shared config files, instance roles); retries default to standard mode with 5 attempts only where
the user set none. No client exists until a step asks for one, so importing the plugin or
collecting tests needs no credentials. Every wait takes its
time and its sleep from a :class:`Clock`, so tests drive waits without sleeping.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.transports.aws_config import user_config

if TYPE_CHECKING:
    import boto3

T = TypeVar("T")


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Clock:
    """Where waits read the time and how they sleep; tests inject a fake that never sleeps."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = _utc_now

    def wait_for(
        self, probe: Callable[[], T | None], *, timeout_s: float, interval_s: float, what: str
    ) -> T:
        """Call `probe` until it returns something other than None; give up after `timeout_s`."""
        deadline = self.monotonic() + timeout_s
        while True:
            result = probe()
            if result is not None:
                return result
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"{what}: not reached within {timeout_s:g} s")
            self.sleep(min(interval_s, remaining))


class WaitTimeout(RuntimeError):
    """A bounded wait on AWS ran out of time."""


class AwsCallError(InputError):
    """AWS refused a call or could not be reached: the message names the call and the reason."""


@dataclass
class AwsClients:
    """boto3 clients for one run, each created the first time it is used."""

    clock: Clock = field(default_factory=Clock)
    session: boto3.Session | None = None
    _clients: dict[str, Any] = field(default_factory=dict, repr=False)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            import boto3
            from botocore.config import Config

            if self.session is None:
                self.session = boto3.Session()
            with aws_errors():
                config = Config(
                    retries=default_retries(self.session.profile_name), connect_timeout=10
                )
                self._clients[service] = self.session.client(service, config=config)
        return self._clients[service]

    @property
    def sagemaker(self) -> Any:
        return self.client("sagemaker")

    @property
    def autoscaling(self) -> Any:
        return self.client("application-autoscaling")

    @property
    def cloudwatch(self) -> Any:
        return self.client("cloudwatch")

    @property
    def logs(self) -> Any:
        return self.client("logs")

    @property
    def region_name(self) -> str | None:
        region: str | None = self.sagemaker.meta.region_name
        return region


# Unless the user's environment or profile says otherwise: standard mode, 5 attempts in all.
DEFAULT_RETRY_MODE = "standard"
DEFAULT_MAX_ATTEMPTS = 5


def default_retries(profile: str | None) -> dict[str, Any]:
    """Retry settings for what the user left unset; AWS_RETRY_MODE, AWS_MAX_ATTEMPTS and a
    profile's retry_mode / max_attempts win (botocore reads whatever key this leaves out)."""
    user = user_config(profile)
    retries: dict[str, Any] = {}
    if "AWS_RETRY_MODE" not in os.environ and "retry_mode" not in user.get_scoped_config():
        retries["mode"] = DEFAULT_RETRY_MODE
    if user.get_config_variable("max_attempts") is None:
        retries["total_max_attempts"] = DEFAULT_MAX_ATTEMPTS
    return retries


@contextlib.contextmanager
def aws_errors() -> Iterator[None]:
    """Turn missing configuration and refused calls into one-line errors (exit 2)."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        NoRegionError,
        ProfileNotFound,
    )

    try:
        yield
    except NoRegionError:
        raise AwsCallError(
            "no AWS region configured: expected AWS_DEFAULT_REGION or a profile with a region "
            "(boto3's standard configuration)"
        ) from None
    except NoCredentialsError:
        raise AwsCallError(
            "no AWS credentials found: expected a profile, AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY or an instance role (boto3's standard configuration)"
        ) from None
    except ProfileNotFound as exc:
        raise AwsCallError(f"{exc}: expected a profile named in ~/.aws/config") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise AwsCallError(
            f"AWS {exc.operation_name} failed: {error.get('Code', '?')}: {error.get('Message', '')}"
        ) from None
    except BotoCoreError as exc:
        raise AwsCallError(f"AWS call failed: {exc}") from None


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError, or '' for anything else."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
