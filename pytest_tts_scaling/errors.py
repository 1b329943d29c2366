"""Errors that end a command with a one-line message (bad input exits 2)."""

from __future__ import annotations


class ToolError(Exception):
    """A run that cannot go on; the message is one line saying what was wrong (exit 2)."""

    exit_code = 2


class InputError(ToolError):
    """Bad arguments or a bad artifact: the message names the field and what was expected."""


class ArtifactError(InputError):
    """An artifact that is missing, unreadable or does not match its schema."""


class MismatchError(InputError):
    """Two inputs that must describe the same configuration do not (slug, SLO, transport)."""


class EndpointUnavailable(ToolError):
    """The endpoint does not answer the workload at all (refused, every answer an error, or
    silence): nothing about its latency can be measured. Under pytest it is an error, not a
    failed SLO."""
