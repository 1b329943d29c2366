"""Errors that end a command with a one-line message (SPEC §6: bad input exits 2)."""

from __future__ import annotations


class InputError(Exception):
    """Bad arguments or a bad artifact: the message names the field and what was expected."""

    exit_code = 2


class ArtifactError(InputError):
    """An artifact that is missing, unreadable or does not match its schema."""


class MismatchError(InputError):
    """Two inputs that must describe the same configuration do not (slug, SLO, transport)."""
