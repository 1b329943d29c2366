"""Options of the commands that read a deployed endpoint (drift, validate, validate-live,
thaw): one definition each, with the command's own help, and the endpoint's default name."""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_tts_scaling.option_table import specs_named
from pytest_tts_scaling.options import RunOptions

ENDPOINT_HELP = "SageMaker endpoint to check. Default: speech-MODEL."


def add_option(parser: Any, flag: str, *aliases: str, help: str) -> None:
    """A shared option (same type and dest as the plugin's) with this command's help text."""
    (spec,) = specs_named(flag)
    kwargs = spec.kwargs()
    kwargs["help"] = help
    parser.add_argument(*aliases, spec.flag, **kwargs)


def with_default_endpoint(options: RunOptions) -> RunOptions:
    """`--endpoint`, else the name infra gives the model's endpoint: `speech-{model}`.

    The command line's default only: under pytest no --endpoint means the local endpoint.
    """
    return dataclasses.replace(options, endpoint=options.endpoint or f"speech-{options.model}")
