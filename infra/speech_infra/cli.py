"""``speech-infra deploy|destroy MODEL``: run the CDK CLI over the app's stacks in order.

deploy: SpeechFoundationStack → SpeechModelCacheStack → SpeechEndpointStack-MODEL, one
``cdk deploy --exclusively`` each, stopping at the first failure.

destroy: only SpeechEndpointStack-MODEL. The foundation (weights bucket, roles) and the model
cache are shared by every model and stay. ``--with-shared`` also destroys the model cache and the
foundation stacks; the weights bucket and its access-log bucket are retained even then
(RemovalPolicy.RETAIN), and the image stays in the CDK bootstrap ECR repository, which no stack
owns. CloudFormation refuses to delete the foundation while another endpoint stack imports it.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_tts_scaling.errors import ArtifactError
from speech_infra.naming import FOUNDATION_STACK, MODEL_CACHE_STACK, endpoint_stack_name
from speech_infra.plan_gate import ScalingDecision, decide_scaling
from speech_infra.registry import REGISTRY
from speech_infra.settings import DEFAULT_ARTIFACTS_DIR

DEFAULT_APP_DIR = Path(__file__).resolve().parent.parent


def default_cdk() -> list[str]:
    """``cdk`` when installed, else the latest CDK v2 CLI through npx."""
    return ["cdk"] if shutil.which("cdk") else ["npx", "--yes", "aws-cdk@2"]


def _context(value: str) -> str:
    if "=" not in value or value.startswith("="):
        raise argparse.ArgumentTypeError(f"Could not parse value: {value!r} (expected KEY=VALUE)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="speech-infra",
        description="Deploy or destroy a speech endpoint with the CDK app in infra/.",
        epilog=f"Known models: {', '.join(REGISTRY)}.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    deploy = commands.add_parser(
        "deploy",
        help="deploy the foundation, the model cache and MODEL's endpoint stack, in that order",
        description="Deploy SpeechFoundationStack, SpeechModelCacheStack, then MODEL's endpoint "
        "stack. Autoscaling is included only if MODEL has a plan artifact (see cdk synth output).",
    )
    destroy = commands.add_parser(
        "destroy",
        help="destroy MODEL's endpoint stack (the bucket and the ECR repository are kept)",
        description="Destroy MODEL's endpoint stack. The shared stacks stay unless --with-shared; "
        "the weights bucket is retained in every case.",
    )
    destroy.add_argument(
        "--with-shared",
        action="store_true",
        help="also destroy SpeechModelCacheStack and SpeechFoundationStack, after the endpoint "
        "stack (their buckets are retained); default: off",
    )
    for sub in (deploy, destroy):
        sub.add_argument("model", metavar="MODEL", help=f"one of: {', '.join(REGISTRY)}")
        sub.add_argument(
            "--dry-run", action="store_true", help="print the commands, run nothing; default: off"
        )
        sub.add_argument(
            "--yes",
            action="store_true",
            help="no prompts: deploy with --require-approval never, destroy with --force; "
            "default: off (the CDK CLI asks)",
        )
        sub.add_argument(
            "-c",
            "--context",
            action="append",
            default=[],
            type=_context,
            metavar="KEY=VALUE",
            help="CDK context for the app, e.g. artifacts_dir=reports or image_uri=URI; "
            "repeatable; default: none (cdk.json's)",
        )
        sub.add_argument("--profile", metavar="NAME", help="AWS profile; default: boto's chain")
        sub.add_argument(
            "--app-dir",
            type=Path,
            default=DEFAULT_APP_DIR,
            metavar="DIR",
            help=f"directory holding cdk.json and app.py; default: {DEFAULT_APP_DIR}",
        )
        sub.add_argument(
            "--cdk",
            type=shlex.split,
            default=None,
            metavar="COMMAND",
            help="how to run the CDK CLI; default: cdk if on PATH, else npx --yes aws-cdk@2",
        )
    return parser


def plan_commands(args: argparse.Namespace, cdk: Sequence[str]) -> list[list[str]]:
    """The CDK CLI invocations for the request, in the order they must run.

    ``--app`` runs app.py with this interpreter, the one that has speech_infra and the plugin's
    schema installed, rather than whatever ``python3`` cdk.json's command finds on PATH.
    """
    endpoint_stack = endpoint_stack_name(args.model)
    options: list[str] = ["--app", shlex.join([sys.executable, "app.py"])]
    for item in args.context:
        options += ["--context", item]
    if args.profile:
        options += ["--profile", args.profile]
    if args.command == "deploy":
        stacks = [FOUNDATION_STACK, MODEL_CACHE_STACK, endpoint_stack]
        extra = ["--require-approval", "never"] if args.yes else []
    else:
        stacks = [endpoint_stack]
        if args.with_shared:
            stacks += [MODEL_CACHE_STACK, FOUNDATION_STACK]
        extra = ["--force"] if args.yes else []
    return [[*cdk, args.command, stack, "--exclusively", *extra, *options] for stack in stacks]


def scaling_decision(args: argparse.Namespace, app_dir: Path) -> ScalingDecision:
    """What the synthesis will decide about autoscaling, said before anything is deployed.

    The plan is looked for where app.py looks: the `artifacts_dir` context (relative to the
    repository root), else `reports/`.
    """
    project_root = app_dir.parent
    given = [item.split("=", 1)[1] for item in args.context if item.startswith("artifacts_dir=")]
    artifacts_dir = Path(given[-1] if given else DEFAULT_ARTIFACTS_DIR).expanduser()
    if not artifacts_dir.is_absolute():
        artifacts_dir = project_root / artifacts_dir
    return decide_scaling(
        REGISTRY[args.model], artifacts_dir=artifacts_dir, project_root=project_root
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model not in REGISTRY:
        parser.error(f"unknown model {args.model!r}. Known models: {', '.join(REGISTRY)}")
    app_dir: Path = args.app_dir.resolve()
    if not (app_dir / "cdk.json").is_file():
        parser.error(f"no cdk.json in {app_dir}: pass --app-dir, the directory of infra/app.py")
    commands = plan_commands(args, args.cdk or default_cdk())

    print(f"# speech-infra {args.command} {args.model}: {len(commands)} step(s) in {app_dir}")
    if args.command == "deploy":
        try:
            decision = scaling_decision(args, app_dir)
            fixed = "" if decision.autoscaling else "; the endpoint deploys without autoscaling"
            print(f"# {decision.message}{fixed}")
        except ArtifactError as exc:
            print(f"speech-infra: {exc}", file=sys.stderr)
            return 2
    for command in commands:
        print(shlex.join(command), flush=True)
        if args.dry_run:
            continue
        try:
            returncode = subprocess.run(command, cwd=app_dir, check=False).returncode
        except FileNotFoundError:
            print(
                f"speech-infra: cannot run {command[0]!r}: install Node.js and the AWS CDK CLI, "
                "or pass --cdk",
                file=sys.stderr,
            )
            return 127
        if returncode != 0:
            print(
                f"speech-infra: step failed with exit code {returncode}; later steps not run",
                file=sys.stderr,
            )
            return returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
