"""Helpers of the infra tests: plan artifacts as `tts-bench plan` writes them, and synthesis.

The synthesis context is the one the CDK CLI passes (infra/cdk.json) plus the test's own keys;
an image override is always set, so no Docker is needed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Before jsii starts its Node process: hide its Node 20 end-of-life banner.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk
from aws_cdk import cx_api
from aws_cdk.assertions import Template
from speech_infra.registry import ModelEndpointConfig
from speech_infra.speech_app import SpeechStacks, add_speech_stacks

from pytest_tts_scaling.artifacts import save
from pytest_tts_scaling.core.schema import PlanArtifact, plan_filename

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MODEL = "kokoro-82m"
IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/speech-tts:test"


def cli_context() -> dict[str, Any]:
    """The context `cdk` passes from infra/cdk.json."""
    return dict(json.loads((INFRA / "cdk.json").read_text())["context"])


def start_app(workdir: Path, artifacts_dir: Path) -> subprocess.Popen[bytes]:
    """Start `python app.py`; templates go to workdir/out, stderr to workdir/stderr.txt."""
    context = {"artifacts_dir": str(artifacts_dir), "image_uri": IMAGE_URI}
    env = os.environ | {
        "CDK_OUTDIR": str(workdir / "out"),
        "CDK_CONTEXT_JSON": json.dumps(context),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    with (workdir / "stderr.txt").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "app.py"],
            cwd=INFRA,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def templates(outdir: Path) -> dict[str, dict[str, Any]]:
    """The JSON templates `python app.py` wrote to `outdir`, by stack name."""
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in outdir.glob("*.template.json")
    }


def of_type(templates: dict[str, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The properties of every resource of this type, across the templates."""
    return [
        resource["Properties"]
        for template in templates.values()
        for resource in template["Resources"].values()
        if resource["Type"] == kind
    ]


def write_plan(directory: Path, plan: PlanArtifact) -> Path:
    return save(plan, directory / plan_filename(plan.model))


@dataclass
class Synth:
    """One synthesized app: its stacks, templates, messages and what it printed."""

    stacks: SpeechStacks
    assembly: cx_api.CloudAssembly
    outdir: Path
    printed: str
    _templates: dict[str, Template] = field(default_factory=dict)

    def stack_names(self) -> list[str]:
        return [self.stacks.foundation.stack_name, self.stacks.model_cache.stack_name] + [
            stack.stack_name for stack in self.stacks.endpoints.values()
        ]

    def template(self, stack: cdk.Stack) -> Template:
        if stack.stack_name not in self._templates:
            artifact = self.assembly.get_stack_artifact(stack.artifact_id)
            self._templates[stack.stack_name] = Template.from_json(artifact.template)
        return self._templates[stack.stack_name]

    @property
    def endpoint(self) -> Template:
        return self.template(self.stacks.endpoints[MODEL])

    @property
    def foundation(self) -> Template:
        return self.template(self.stacks.foundation)

    @property
    def model_cache(self) -> Template:
        return self.template(self.stacks.model_cache)

    def messages(self, level: str) -> list[tuple[str, str]]:
        """(construct path, text) of each annotation at `level` (error, warning, info).

        Read from the cloud assembly's manifest, as the CDK CLI does when it decides to fail.
        """
        manifest = json.loads((self.outdir / "manifest.json").read_text())
        found = []
        for artifact in manifest["artifacts"].values():
            metadata = dict(artifact.get("metadata", {}))
            if "additionalMetadataFile" in artifact:
                extra = json.loads((self.outdir / artifact["additionalMetadataFile"]).read_text())
                metadata.update(extra)
            for path, entries in metadata.items():
                for entry in entries:
                    if entry["type"] == f"aws:cdk:{level}":
                        found.append((path, str(entry["data"])))
        return found


SynthFactory = Callable[..., Synth]


def synthesize(
    outdir: Path,
    *,
    artifacts_dir: Path,
    context: dict[str, Any] | None = None,
    registry: dict[str, ModelEndpointConfig] | None = None,
    project_root: Path = ROOT,
) -> Synth:
    full = cli_context() | {"artifacts_dir": str(artifacts_dir), "image_uri": IMAGE_URI}
    full |= context or {}
    full = {key: value for key, value in full.items() if value is not None}
    app = cdk.App(outdir=str(outdir), context=full)
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        stacks = add_speech_stacks(app, project_root=project_root, registry=registry)
    assembly = app.synth()
    return Synth(stacks, assembly, outdir, printed.getvalue())


def flatten(value: Any) -> str:
    """An intrinsic as text: Fn::Join joined, references as ${...}; for substring checks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(flatten(item) for item in value)
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key == "Fn::Join":
            separator, parts = inner
            return str(separator).join(flatten(part) for part in parts)
        if key == "Ref":
            return "${" + str(inner) + "}"
        if key == "Fn::GetAtt":
            return "${" + ".".join(str(part) for part in inner) + "}"
        if key == "Fn::ImportValue":
            return "${Import:" + flatten(inner) + "}"
    return json.dumps(value, sort_keys=True)


def resources(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: dict(resource) for logical_id, resource in template.find_resources(kind).items()
    }


def statements(template: Template) -> list[dict[str, Any]]:
    """Every statement granted to an IAM identity (AWS::IAM::Policy, inline role policies)."""
    found: list[dict[str, Any]] = []
    for resource in template.to_json()["Resources"].values():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::Role"):
            continue
        props = resource.get("Properties", {})
        documents = [props.get("PolicyDocument")] + [
            policy.get("PolicyDocument") for policy in props.get("Policies", [])
        ]
        for document in documents:
            if document:
                found.extend(document["Statement"])
    return found


def actions_of(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)
