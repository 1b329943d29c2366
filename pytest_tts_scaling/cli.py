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

from pytest_tts_scaling import __version__
from pytest_tts_scaling.errors import ToolError

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        code: int = args.func(args)
    except ToolError as exc:
        print(f"tts-bench {getattr(args, 'command', '')}: error: {exc}", file=sys.stderr)
        return exc.exit_code
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
