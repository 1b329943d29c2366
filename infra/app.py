#!/usr/bin/env python3
"""The speech endpoints' CDK app: `cdk synth` here, or `speech-infra deploy MODEL`.

Context: `artifacts_dir` (plan artifacts, default `reports`, relative to the repository root)
and `image_uri` (a prebuilt ECR image instead of building container/). See speech_infra.settings.
"""

import sys
from pathlib import Path

import aws_cdk as cdk
from speech_infra.speech_app import add_speech_stacks

from pytest_tts_scaling.errors import ToolError

app = cdk.App()
try:
    add_speech_stacks(app, project_root=Path(__file__).resolve().parent.parent)
except ToolError as exc:
    # A broken plan is one line naming the file and field, not a Python traceback.
    print(f"speech-infra synth: error: {exc}", file=sys.stderr)
    raise SystemExit(exc.exit_code) from None
app.synth()
