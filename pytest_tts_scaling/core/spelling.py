"""How an option of the table is spelled by each front end.

Under pytest every option but `--endpoint` and `--endpoint-url` carries the `--tts-` prefix: the
options live in every pytest session of the environment, beside other plugins' and the user's
own. `tts-bench` owns its command line and keeps the bare names. Imports nothing, so the options
and the steps below both front ends can name a flag the way the user typed it.
"""

from __future__ import annotations

from collections.abc import Iterable

# The interface users were promised: these keep their names under pytest too.
UNPREFIXED = frozenset({"--endpoint", "--endpoint-url"})


def pytest_flag(flag: str) -> str:
    """`--ladder` → `--tts-ladder`: the spelling of a table flag under pytest."""
    return flag if flag in UNPREFIXED else f"--tts-{flag.removeprefix('--')}"


def both_flags(flag: str) -> str:
    """A flag as a message names it for either front end: `--tts-ladder (tts-bench: --ladder)`.

    Errors and advice are raised below both pytest and tts-bench, which spell most options
    differently; the user reads the spelling of the command they ran.
    """
    spelled = pytest_flag(flag)
    return flag if spelled == flag else f"{spelled} (tts-bench: {flag})"


def closest_flag(word: str, flags: Iterable[str]) -> str | None:
    """The flag a misspelled `word` (`--tts-ladr=1,2`) most likely meant, else None.

    (argparse suggests only from Python 3.14 on, and then only for choices.)
    """
    import difflib

    close = difflib.get_close_matches(word.partition("=")[0], list(flags), n=1, cutoff=0.6)
    return close[0] if close else None
