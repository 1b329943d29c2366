"""docs/production.md's walk-through, step by step against moto, with the commands as printed.

The commands are read from the pages (the walk-through's `tts-bench …` spans and the promotion
gate's block in docs/ci.md), so the test breaks when the docs drift from the tool. What the page
leaves to the user is filled in: the SLUG and `…` of artifact paths (the one file the earlier step
wrote), the peak and trough rates, and a short ladder for qmax. `speech-infra deploy` is CDK, so
moto gets the endpoint the way the other AWS tests build it (aws_helpers.deploy): first without
scaling, then with the plan's policy. The SageMaker runtime is the event-stream stand-in.

ttotal runs through `tts-bench ttotal` in this process rather than as a console script: moto
applies a capacity change at once and writes no instance logs, so SageMaker's side of the
scale-out is played in a fake clock by tests.aws.provisioning.Provisioning, which needs the clients
the command uses.
"""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import contextlib
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pytest_tts_scaling.artifacts import load
from pytest_tts_scaling.aws.clients import AwsClients
from pytest_tts_scaling.aws.scaleout.stages import log_group
from pytest_tts_scaling.cli import main
from pytest_tts_scaling.core.schema import PlanArtifact, QmaxArtifact, TtotalArtifact
from tests.aws.aws_helpers import (
    ALL_FALSE,
    FakeClock,
    client,
    deploy,
    desired_count,
    put_concurrency,
    suspended,
    teardown,
)
from tests.aws.eventstream_server import (
    EventStreamServer,
    Script,
    payload_part,
)
from tests.aws.provisioning import Provisioning, existing_instance_log

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "docs" / "production.md"
CI_PAGE = ROOT / "docs" / "ci.md"
ENDPOINT = "speech-kokoro-82m"
PCM = b"\x01\x00" * 2400  # 0.1 s at 24 kHz
# qmax: first audio after 100 ms. ttotal: one instance overloaded, then the load shared.
MEASURED = Script([(0.1, payload_part(PCM)), (0.02, payload_part(PCM))])
SLOW = Script([(0.4, payload_part(PCM))])
FAST = Script([(0.01, payload_part(PCM))])
# The new instance takes half the probe once the probe has had this many more slow answers
# after it entered service: the recovery follows traffic, never a timer.
SLOW_AFTER_IN_SERVICE = 4
# Enough for a judged rung on a busy machine: about 8 completions a second per stream at N=1.
SHORT_LADDER = ("--ladder", "1,2", "--hold-s", "6", "--measure-s", "4", "--gap-s", "0")
PROBE = ("--hold-s", "0.5", "--measure-s", "0.3")
RATES = {"--peak-rps": "5000", "--trough-rps": "10"}


def section(text: str, heading: str) -> str:
    """The Markdown section under `heading`, up to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    end = re.compile(rf"\n#{{1,{len(level)}}} ").search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def walkthrough_commands() -> dict[str, list[str]]:
    """Each `tts-bench SUBCOMMAND …` of the walk-through's numbered steps, first per subcommand."""
    text = section(PRODUCTION.read_text(encoding="utf-8"), "## The walk-through")
    steps = text[text.index("\n1. ") :]
    commands: dict[str, list[str]] = {}
    for span in re.findall(r"`(tts-bench [^`]+)`", steps):
        words = shlex.split(" ".join(span.split()))
        commands.setdefault(words[1], words)
    return commands


def gate_command() -> list[str]:
    gate = section(CI_PAGE.read_text(encoding="utf-8"), "## Promotion gate")
    [block] = re.findall(r"```bash\n(.*?)```", gate, flags=re.DOTALL)
    return shlex.split(block.replace("\\\n", " "))


def filled(words: list[str], cwd: Path, given: dict[str, str]) -> list[str]:
    """The page's placeholders filled: a path with `…` or SLUG is the one file it matches."""
    out: list[str] = []
    for word in words:
        if out and out[-1] in given:
            word = given[out[-1]]
        elif "…" in word or "SLUG" in word:
            pattern = word.replace("…", "*").replace("SLUG", "*")
            matches = glob.glob(pattern, root_dir=cwd)
            assert len(matches) == 1, f"{word}: expected one file in {cwd}, found {matches}"
            word = matches[0]
        out.append(word)
    return out


def bench(env: dict[str, str], cwd: Path, words: list[str]) -> subprocess.CompletedProcess[str]:
    assert words[0] == "tts-bench"
    return subprocess.run(
        [str(BIN / "tts-bench"), *words[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one(directory: Path, pattern: str) -> Path:
    [path] = directory.glob(pattern)
    return path


@pytest.fixture
def cloudwatch_feed(runtime: EventStreamServer) -> Iterator[None]:
    """CloudWatch's part, which moto does not play: the stand-in's in-flight count published as
    ConcurrentRequestsPerModel every half second, so the ladder's CloudWatch join finds it."""
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.5):
            put_concurrency(ENDPOINT, "AllTraffic", [(datetime.now(UTC), runtime.in_flight)])

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def fixed_name(aws_env: dict[str, str]) -> Iterator[str]:
    """The page's endpoint name, with nothing left from another test or session."""

    def clean() -> None:
        teardown(ENDPOINT)
        logs = client("logs")
        with contextlib.suppress(logs.exceptions.ResourceNotFoundException):
            logs.delete_log_group(logGroupName=log_group(ENDPOINT))

    clean()
    yield ENDPOINT
    clean()


def test_the_walkthrough_runs_as_printed_against_moto(
    aws_env: dict[str, str],
    runtime: EventStreamServer,
    fixed_name: str,
    cloudwatch_feed: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = walkthrough_commands()
    assert {"drift", "qmax", "ttotal", "plan", "validate", "thaw"} <= set(commands)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    reports = tmp_path / "reports"

    # 1. Deployed without scaling: a fixed fleet, no scalable target, no alarms.
    deploy(
        fixed_name,
        instances=1,
        target=False,
        tracking=False,
        step=False,
        first_chunk_alarm=False,
    )
    existing_instance_log(fixed_name)
    runtime.scripts[fixed_name] = MEASURED

    # 2. Preflight.
    drift = bench(env, tmp_path, filled(commands["drift"], tmp_path, {}))
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert drift.stdout.splitlines()[-1] == "preflight-ok"

    # 3. Q_max on staging (a short ladder; the page's default is the adaptive search).
    qmax_run = bench(env, tmp_path, [*filled(commands["qmax"], tmp_path, {}), *SHORT_LADDER])
    assert qmax_run.returncode == 0, qmax_run.stdout + qmax_run.stderr
    qmax_path = one(reports, "qmax-kokoro-82m-response-stream-g4dnxlarge-8b1b96bc.json")
    qmax = load(qmax_path, QmaxArtifact)
    assert qmax.frozen
    assert qmax.complete
    assert all(r.cw_ratio is not None for r in qmax.rungs)  # the CloudWatch join found data
    assert [r.concurrency for r in qmax.rungs if r.usable] == [1, 2]
    assert desired_count(fixed_name) == 1  # restored after the freeze

    # 4. T_total: the page's command, SageMaker's provisioning played in a fake clock.
    clock = FakeClock()
    clock.start = clock.start.replace(microsecond=0)  # log timestamps are in ms
    clients = AwsClients(clock=clock.clock())
    runtime.scripts[fixed_name] = SLOW

    def share_the_load() -> None:
        runtime.switch_after(fixed_name, SLOW_AFTER_IN_SERVICE, FAST)

    Provisioning(clock, fixed_name, on_in_service=share_the_load).install(clients)
    monkeypatch.setattr("pytest_tts_scaling.endpoints.sagemaker.AwsClients", lambda: clients)
    monkeypatch.chdir(tmp_path)
    ttotal_words = filled(commands["ttotal"], tmp_path, {})
    assert ttotal_words[ttotal_words.index("--qmax-artifact") + 1] == str(
        qmax_path.relative_to(tmp_path)
    )
    assert main([*ttotal_words[1:], *PROBE]) == 0
    ttotal = load(one(reports, "ttotal-kokoro-82m-forced-g4dnxlarge-8b1b96bc.json"), TtotalArtifact)
    assert ttotal.probe["recovered"] is True
    assert ttotal.missing_stages == []
    assert desired_count(fixed_name) == 1
    runtime.scripts[fixed_name] = MEASURED
    # The thaw step 3 names for a hard kill: with nothing left frozen it changes nothing.
    thaw = bench(env, tmp_path, filled(commands["thaw"], tmp_path, {}))
    assert thaw.returncode == 0, thaw.stdout + thaw.stderr
    assert desired_count(fixed_name) == 1

    # 5. Plan into reports/.
    plan_run = bench(env, tmp_path, filled(commands["plan"], tmp_path, RATES))
    assert plan_run.returncode == 0, plan_run.stdout + plan_run.stderr
    plan_path = reports / "plan-kokoro-82m.json"
    assert f"plan written to {plan_path.relative_to(tmp_path)}" in plan_run.stdout
    plan = load(plan_path, PlanArtifact)
    assert plan.verdict != "stop", [f.name for f in plan.findings if f.verdict == "stop"]

    # 6. Redeployed with the plan's scaling (what speech-infra synthesizes from the file).
    teardown(fixed_name)
    deploy(
        fixed_name,
        instances=plan.min_instances,
        env={"QUEUE_MAX_DEPTH": str(plan.queue_max_depth)},
        min_capacity=plan.min_instances,
        max_capacity=plan.max_instances,
        target_value=plan.scaling_target_value,
        scale_out_cooldown=plan.scale_out_cooldown_s,
        scale_in_threshold=plan.scale_in_threshold,
        scale_in_cooldown=plan.scale_in_cooldown_s,
        first_chunk_ms=plan.first_chunk_alarm_ms,
    )

    # 7. Validate.
    validate = bench(env, tmp_path, filled(commands["validate"], tmp_path, {}))
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert validate.stdout.splitlines()[-1].startswith("validate-ok: ")

    # 8. The promotion gate, with this walk-through's artifacts in place of the examples.
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    ours = {"qmax": str(qmax_path), "ttotal": str(one(reports, "ttotal-*.json"))}
    gate = [
        next((v for k, v in ours.items() if w.startswith(f"reports/examples/source/{k}-")), w)
        for w in gate_command()
    ]
    assert gate[0] == "pytest"
    assert str(qmax_path) in gate
    junit = tmp_path / gate[gate.index("--junitxml") + 1]
    result = subprocess.run(
        [str(BIN / "python"), "-m", "pytest", "-p", "no:cacheprovider", *gate[1:]],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    cases = {c.get("name", ""): c for c in ET.parse(junit).iter("testcase")}
    assert "test_plan_has_no_stop_findings" in cases
    assert "test_validate[target_value]" in cases
    assert "test_drift[suspended_scaling]" in cases
    assert not [n for n, c in cases.items() if c.find("failure") is not None]
    assert suspended(f"endpoint/{fixed_name}/variant/AllTraffic") == ALL_FALSE
