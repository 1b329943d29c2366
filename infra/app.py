#!/usr/bin/env python3
"""The speech endpoints' CDK app: `cdk synth` here, or `speech-infra deploy MODEL`.

Context: `artifacts_dir` (plan artifacts, default `reports`, relative to the repository root)
and `image_uri` (a prebuilt ECR image instead of building container/). See speech_infra.settings.
"""

from pathlib import Path

import aws_cdk as cdk
from speech_infra.speech_app import add_speech_stacks

app = cdk.App()
add_speech_stacks(app, project_root=Path(__file__).resolve().parent.parent)
app.synth()
