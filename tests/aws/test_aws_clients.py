"""Clients come from boto3's standard chain, lazily; waits use the injected clock."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import subprocess
import sys
from pathlib import Path

from pytest_tts_scaling.aws.clients import AwsCallError, AwsClients, WaitTimeout, aws_errors
from tests.aws.aws_helpers import FakeClock


def test_importing_the_aws_modules_imports_no_aws_sdk() -> None:
    code = (
        "import sys\n"
        "import pytest_tts_scaling.plugin, pytest_tts_scaling.cli\n"
        "import pytest_tts_scaling.endpoints.sagemaker, pytest_tts_scaling.aws.lifecycle.freeze\n"
        "import pytest_tts_scaling.aws.checks.drift, pytest_tts_scaling.aws.checks.validate\n"
        "import pytest_tts_scaling.aws.cloudwatch\n"
        "import pytest_tts_scaling.load.transports.sagemaker_stream\n"
        "import pytest_tts_scaling.load.transports.sagemaker_bidi\n"
        "import pytest_tts_scaling.commands.drift, pytest_tts_scaling.commands.validate\n"
        "import pytest_tts_scaling.commands.thaw\n"
        "sdk = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'boto3', 'botocore', 'aioboto3', 'aiobotocore'})\n"
        "assert not sdk, sdk\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_no_client_exists_until_one_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    clients = AwsClients()  # no region anywhere: still fine
    with pytest.raises(AwsCallError, match="no AWS region configured"):
        _ = clients.sagemaker


def test_region_and_endpoint_come_from_the_environment(aws_env: dict[str, str]) -> None:
    clients = AwsClients()
    assert clients.region_name == "us-east-1"
    assert clients.sagemaker.meta.endpoint_url == aws_env["AWS_ENDPOINT_URL"]
    assert clients.sagemaker is clients.client("sagemaker")


def test_refused_call_is_one_line(clients: AwsClients) -> None:
    with pytest.raises(AwsCallError) as caught, aws_errors():
        clients.sagemaker.describe_endpoint_config(EndpointConfigName="missing")
    assert str(caught.value).startswith("AWS DescribeEndpointConfig failed: ")
    assert "\n" not in str(caught.value)


def test_wait_returns_as_soon_as_ready() -> None:
    fake = FakeClock()
    answers = iter([None, None, "ready"])
    assert (
        fake.clock().wait_for(lambda: next(answers), timeout_s=60, interval_s=5, what="x")
        == "ready"
    )
    assert fake.sleeps == [5, 5]


def test_wait_gives_up_after_its_timeout_without_sleeping_for_real() -> None:
    fake = FakeClock()
    with pytest.raises(WaitTimeout, match="endpoint InService: not reached within 60 s"):
        fake.clock().wait_for(lambda: None, timeout_s=60, interval_s=15, what="endpoint InService")
    assert sum(fake.sleeps) == 60
    assert fake.sleeps == [15, 15, 15, 15]


def _retry_settings(clients: AwsClients) -> tuple[str, int]:
    config = clients.sagemaker.meta.config
    return config.retries["mode"], config.retries["total_max_attempts"]


def test_retries_default_to_standard_with_five_attempts(aws_env: dict[str, str]) -> None:
    assert _retry_settings(AwsClients()) == ("standard", 5)


def test_the_users_retry_environment_wins(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "9")
    assert _retry_settings(AwsClients()) == ("adaptive", 9)
    monkeypatch.delenv("AWS_RETRY_MODE")
    assert _retry_settings(AwsClients()) == ("standard", 9)


def test_the_users_profile_retry_settings_win(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text(
        "[profile bench]\nregion = us-east-1\nretry_mode = legacy\nmax_attempts = 2\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "bench")
    assert _retry_settings(AwsClients()) == ("legacy", 2)
