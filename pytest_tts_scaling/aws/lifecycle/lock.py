"""The freeze lock: tags on the endpoint, so every run on every machine sees who holds it.

A snapshot file only protects runs that share an artifacts directory. The lock lives with the
endpoint instead: three tags per run, keyed by the run id so two runs never overwrite each
other's (`tts-bench:lock:RUN` who and since when, `tts-bench:snapshot:RUN` where its snapshot
file is, `tts-bench:restore:RUN` the values the restore puts back). With the restore values on
the endpoint, `tts-bench thaw` restores everything from any machine, snapshot file or not.

Taking the lock is write-then-read: a run adds its tags, lists the endpoint's tags again, and
backs off (removing only its own) when another run's lock is there. Two runs that race can
never both proceed: the later of the two read-backs sees the other's tags unless that run has
already backed off; when both read back before either backs off, both back off.

Tag values allow letters, digits, spaces and `_ . : / = + - @`, up to 256 characters.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass, replace
from typing import Any

from pytest_tts_scaling.aws import scaling

LOCK_KEY = "tts-bench:lock:"
SNAPSHOT_KEY = "tts-bench:snapshot:"
RESTORE_KEY = "tts-bench:restore:"
_TAG_VALUE = re.compile(r"^[\w\s.:/=+\-@]{0,256}$")
_FLAG_WORDS = dict(
    zip(("in", "out", "scheduled"), scaling.SUSPEND_FLAGS, strict=True),
)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def this_host() -> str:
    return socket.gethostname() or "unknown-host"


@dataclass(frozen=True)
class RestoreValues:
    """What a freeze changes, as it was: the restore puts exactly these back."""

    desired: int | None
    min_capacity: int | None = None
    max_capacity: int | None = None
    suspended: dict[str, bool] | None = None

    def tag(self) -> str:
        words = [f"desired={'none' if self.desired is None else self.desired}"]
        if self.suspended is None:
            words.append("target=none")
        else:
            words += [f"min={self.min_capacity}", f"max={self.max_capacity}"]
            words += [
                f"{word}={str(self.suspended[flag]).lower()}" for word, flag in _FLAG_WORDS.items()
            ]
        return " ".join(words)

    @classmethod
    def parse(cls, value: str) -> RestoreValues:
        fields = dict(word.split("=", 1) for word in value.split() if "=" in word)
        desired = fields.get("desired", "none")
        if fields.get("target") == "none" or "min" not in fields:
            return cls(None if desired == "none" else int(desired))
        return cls(
            desired=None if desired == "none" else int(desired),
            min_capacity=int(fields["min"]),
            max_capacity=int(fields["max"]),
            suspended={flag: fields.get(word) == "true" for word, flag in _FLAG_WORDS.items()},
        )


@dataclass(frozen=True)
class FreezeLock:
    """One run's hold on an endpoint, as its tags say."""

    run_id: str
    host: str
    pid: int
    created_at: str
    snapshot: str | None
    restore: RestoreValues | None
    component: str | None = None
    # Set by a run whose restore failed: it has let go, so thaw need not wait for it to end.
    abandoned: bool = False

    def tags(self) -> list[dict[str, str]]:
        who = f"host={self.host} pid={self.pid} at={self.created_at}"
        if self.component:
            who += f" component={self.component}"
        if self.abandoned:
            who += " abandoned=true"
        tags = [{"Key": LOCK_KEY + self.run_id, "Value": who}]
        if self.snapshot and _TAG_VALUE.match(self.snapshot):
            tags.append({"Key": SNAPSHOT_KEY + self.run_id, "Value": self.snapshot})
        if self.restore is not None:
            tags.append({"Key": RESTORE_KEY + self.run_id, "Value": self.restore.tag()})
        return tags

    @property
    def keys(self) -> list[str]:
        return [prefix + self.run_id for prefix in (LOCK_KEY, SNAPSHOT_KEY, RESTORE_KEY)]

    def alive(self) -> bool | None:
        """Whether the run still holds on: known on its own host only (else None)."""
        if self.abandoned:
            return False
        if self.host != this_host():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        state = {True: "still running", False: "no longer running", None: "state unknown"}[
            self.alive()
        ]
        if self.abandoned:
            state = "gave up after a failed restore"
        where = "this host" if self.host == this_host() else f"host {self.host}"
        return f"run {self.run_id} (pid {self.pid} on {where}, {state}, since {self.created_at})"


def read_locks(sagemaker: Any, arn: str) -> list[FreezeLock]:
    """Every run's lock on the resource, oldest first; a tag written twice counts once."""
    values: dict[str, str] = {}
    for page in sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn):
        for tag in page.get("Tags", []):
            values[tag["Key"]] = tag.get("Value", "")
    locks: list[FreezeLock] = []
    for key, value in values.items():
        if not key.startswith(LOCK_KEY):
            continue
        run_id = key[len(LOCK_KEY) :]
        who = dict(word.split("=", 1) for word in value.split() if "=" in word)
        restore = values.get(RESTORE_KEY + run_id)
        try:
            pid = int(who.get("pid", "0"))
            parsed = RestoreValues.parse(restore) if restore is not None else None
        except ValueError:
            pid, parsed = 0, None
        locks.append(
            FreezeLock(
                run_id=run_id,
                host=who.get("host", "unknown-host"),
                pid=pid,
                created_at=who.get("at", "unknown"),
                snapshot=values.get(SNAPSHOT_KEY + run_id),
                restore=parsed,
                component=who.get("component"),
                abandoned=who.get("abandoned") == "true",
            )
        )
    return sorted(locks, key=lambda lock: (lock.created_at, lock.run_id))


def write_lock(sagemaker: Any, arn: str, lock: FreezeLock) -> None:
    sagemaker.add_tags(ResourceArn=arn, Tags=lock.tags())


def abandon_lock(sagemaker: Any, arn: str, lock: FreezeLock) -> None:
    """Mark the lock as let go (the restore failed): thaw may then go ahead from anywhere."""
    sagemaker.delete_tags(ResourceArn=arn, TagKeys=[LOCK_KEY + lock.run_id])
    write_lock(sagemaker, arn, replace(lock, abandoned=True))


def remove_lock(sagemaker: Any, arn: str, lock: FreezeLock) -> None:
    sagemaker.delete_tags(ResourceArn=arn, TagKeys=lock.keys)
