"""`tts-bench plan`: the policy from the qmax and ttotal artifacts, offline (SPEC §4 plan).

Prints the report and the paste-ready registry entry and writes ``plan-{model}.json`` (an earlier,
different one is kept aside under a timestamped name; the same plan again stays put). Exit 0
for a plan with verdict ok or warn, 1 for stop, 2 for bad input (raised as InputError).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from pytest_tts_scaling.option_table import add_to_argparse, specs_named
from pytest_tts_scaling.options import RunOptions

# Under pytest these are --qmax-artifact / --ttotal-artifact; the same dests, shorter flags here.
ARTIFACT_FLAGS = {"--qmax-artifact": "--qmax", "--ttotal-artifact": "--ttotal"}
FLAGS = (
    "--peak-rps",
    "--trough-rps",
    "--min-floor",
    "--surge-ratio",
    "--slo-ms",
    "--allow-config-mismatch",
    "--artifacts-dir",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="derive thresholds, cooldowns and fleet size from qmax and ttotal artifacts",
        description="Turn a qmax and a ttotal artifact into the autoscaling policy: thresholds, "
        "cooldowns, fleet size and findings, each checked by simulating the fleet. Offline: "
        "calls nothing. Writes plan-MODEL.json to --artifacts-dir and prints the registry entry.",
    )
    for spec in specs_named(*ARTIFACT_FLAGS):
        short = ARTIFACT_FLAGS[spec.flag]
        parser.add_argument(short, spec.flag, **dataclasses.replace(spec, flag=short).kwargs())
    add_to_argparse(parser, specs_named(*FLAGS))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pytest_tts_scaling.artifacts import kept_lines, load, save_keeping
    from pytest_tts_scaling.core.plan import compute_plan, inputs_from_options, report_lines
    from pytest_tts_scaling.core.schema import QmaxArtifact, TtotalArtifact, plan_filename
    from pytest_tts_scaling.errors import InputError

    values = {k: v for k, v in vars(args).items() if k.startswith("tts_")}
    options = RunOptions.from_namespace(values)
    for path, flag in ((options.qmax_artifact, "--qmax"), (options.ttotal_artifact, "--ttotal")):
        if path is None:
            raise InputError(f"{flag} FILE is required: the {flag[2:]} artifact to plan from")
    assert options.qmax_artifact is not None
    assert options.ttotal_artifact is not None
    qmax = load(options.qmax_artifact, QmaxArtifact)
    ttotal = load(options.ttotal_artifact, TtotalArtifact)
    outcome = compute_plan(qmax, ttotal, inputs_from_options(options))
    plan = outcome.artifact
    path = Path(options.artifacts_dir) / plan_filename(plan.model)
    kept = kept_lines(save_keeping(plan, path))
    for line in report_lines(plan):
        print(line)
    for line in kept:
        print(f"plan: {line}")
    print(f"plan written to {path}")
    print("paste into infra/speech_infra/registry.py REGISTRY:")
    print(plan.config_block)
    if plan.verdict == "stop":
        stops = ", ".join(f.name for f in plan.findings if f.verdict == "stop")
        print(f"plan: FAIL: verdict stop ({stops})")
        return 1
    return 0
