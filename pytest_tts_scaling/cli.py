"""`tts-bench`: the five steps (and their helpers) from the command line.

Each subcommand lives in `pytest_tts_scaling.commands.<name>` with `register(subparsers)`, which
adds its parser and sets `func(args) -> int`. Exit codes: 0 ok/warn, 1 a failed check, 2 bad
input or an endpoint that does not answer.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from pytest_tts_scaling import __version__
from pytest_tts_scaling.core.spelling import closest_flag
from pytest_tts_scaling.errors import ToolError
from pytest_tts_scaling.optional import missing_extra

COMMANDS = (
    "qmax",
    "ttotal",
    "drift",
    "plan",
    "validate",
    "validate_live",
    "thaw",
    "compare",
    "load",
    "report",
    "export",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tts-bench",
        description="Measure a streaming TTS endpoint's Q_max and T_total and derive its "
        "autoscaling policy. The same steps run under pytest with -m STEP.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"pytest_tts_scaling.commands.{name}").register(subparsers)
    parser.set_defaults(subcommands=subparsers.choices)
    return parser


def refuse_unknown(command: argparse.ArgumentParser, unknown: list[str]) -> NoReturn:
    """A flag the subcommand does not take: its own usage, and the closest flag it does take."""
    flags = [flag for action in command._actions for flag in action.option_strings]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    for word in unknown:
        if word.startswith("-") and (close := closest_flag(word, flags)) is not None:
            message += f"; did you mean {close}?"
            break
    command.error(message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            refuse_unknown(args.subcommands[args.command], unknown)
        code: int = args.func(args)
    except ToolError as exc:
        print(f"tts-bench {getattr(args, 'command', '')}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        if (missing := missing_extra(exc)) is None:
            raise
        print(f"tts-bench {getattr(args, 'command', '')}: error: {missing}", file=sys.stderr)
        return missing.exit_code
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt as exc:
        # A stop signal raises Terminated (SIGTERM, SIGHUP): exit 128 + its number, as a shell does.
        code = getattr(exc, "exit_code", 130)
        print(f"tts-bench: stopped: {str(exc) or 'interrupted (SIGINT)'}", file=sys.stderr)
        return int(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
