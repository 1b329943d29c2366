"""The one shape of every progress and log sink: steps and adapters hand people finished lines
through it, so a door decides where they go (a terminal, pytest's reporter, a list in a test)."""

from collections.abc import Callable

Progress = Callable[[str], None]
