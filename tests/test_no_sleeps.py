"""Tests wait on conditions, not time: a new `time.sleep` in a test is refused here.

A sleep standing in for an event fails on a busy machine (the event comes later) and wastes time
on an idle one. Wait for the condition instead, bounded (a deadline, `Event.wait`, a test's
timeout marker). The few sleeps left are listed with why; a new one, or one more in a listed
file, fails until it is replaced or listed with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tests", "container/tests", "scenarios")

# file: (how many time.sleep calls, why each is not a stand-in for an event)
ALLOWED: dict[str, tuple[int, str]] = {
    "tests/aws/conftest.py": (1, "the poll interval of a bounded wait for moto's server to listen"),
    "tests/aws/eventstream_server.py": (1, "the stand-in endpoint's scripted delays: its latency"),
    "tests/aws/freeze_child.py": (1, "a child holding its freeze until the test signals it"),
    "tests/aws/test_aws_lock.py": (1, "the poll interval of a bounded wait for the child's line"),
    "tests/aws/test_aws_signals.py": (1, "the poll interval of a bounded wait for the child"),
    "tests/test_calibration_servers.py": (
        1,
        "a race tried 300 times: the connect is spread around the server's exit on purpose",
    ),
    "tests/test_client_honesty.py": (2, "blocking the client's loop is the fault under test"),
    "tests/test_fleet_load.py": (1, "the poll interval of a bounded wait for a port"),
    "tests/test_fleet_localfleet.py": (1, "the poll interval of the file's bounded wait helper"),
    "container/tests/container_fake_server.py": (1, "the poll interval of a bounded wait"),
    "container/tests/container_fakes.py": (
        2,
        "the fake engine's synthesis time (its latency); the poll interval of wait_closed",
    ),
    "container/tests/test_container_device.py": (2, "poll intervals of a bounded wait on /ping"),
    "container/tests/test_container_e2e.py": (
        3,
        "poll intervals of bounded waits on /ping and the server's log; pings spread over a run",
    ),
    "container/tests/test_container_fuzz.py": (
        3,
        "poll intervals of bounded waits for the slot's release; a half-sent body left pending",
    ),
    "container/tests/test_container_shutdown.py": (
        3,
        "poll intervals of bounded waits (in flight, /ping stopping, the listener closed)",
    ),
    "container/tests/test_container_synthetic.py": (1, "the poll interval of a bounded wait"),
    "container/tests/test_container_websocket.py": (1, "the poll interval of a bounded wait"),
}


def sleeps_in(source: str) -> int:
    """`time.sleep(...)` calls, and `sleep(...)` where it was imported from time."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name == "sleep"
    }
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "sleep":
            count += isinstance(func.value, ast.Name) and func.value.id == "time"
        elif isinstance(func, ast.Name) and func.id in names:
            count += 1
    return count


def test_sleeps_in_reads_both_spellings() -> None:
    source = (
        "import time\nfrom time import sleep as nap\n"
        "def f():\n    time.sleep(1)\n    nap(2)\n    asyncio.sleep(3)\n    clock.sleep(4)\n"
    )
    assert sleeps_in(source) == 2


def test_no_new_sleeps_in_tests() -> None:
    found = {
        str(path.relative_to(ROOT)): count
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (count := sleeps_in(path.read_text(encoding="utf-8")))
    }
    over = {
        name: f"{count} time.sleep (allowed {ALLOWED.get(name, (0, ''))[0]})"
        for name, count in found.items()
        if count > ALLOWED.get(name, (0, ""))[0]
    }
    assert over == {}, "wait for the condition instead of sleeping (or list it with why)"
    # A listed sleep that is gone leaves its entry: the list shrinks with the sleeps.
    assert {name: ALLOWED[name][0] for name in ALLOWED if found.get(name) != ALLOWED[name][0]} == {}
