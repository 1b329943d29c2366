"""Synthesis fixtures: each variant of the CDK app is synthesized once per session.

CDK synthesis runs a Node process through jsii and costs seconds, so the variants (no plan,
a plan, a plan with verdict stop, scaling disabled) are session fixtures shared by the tests.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

# Before jsii starts its Node process: hide its Node 20 end-of-life banner.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest
from infra_helpers import MODEL, Synth, SynthFactory, synthesize, write_plan
from speech_infra.registry import REGISTRY

from pytest_tts_scaling.core.schema import Finding
from tests.factories import make_plan


@pytest.fixture(scope="session")
def synth_app(tmp_path_factory: pytest.TempPathFactory) -> SynthFactory:
    def build(name: str, **kwargs: Any) -> Synth:
        return synthesize(tmp_path_factory.mktemp(f"cdk-{name}"), **kwargs)

    return build


@pytest.fixture(scope="session")
def no_plan(synth_app: SynthFactory, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synth_app("no-plan", artifacts_dir=tmp_path_factory.mktemp("empty-reports"))


@pytest.fixture(scope="session")
def with_plan(synth_app: SynthFactory, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    reports = tmp_path_factory.mktemp("reports")
    # queue_max_depth 48 differs from the registry's 50: shows which one the container gets.
    write_plan(reports, make_plan(queue_max_depth=48))
    return synth_app("plan", artifacts_dir=reports)


@pytest.fixture(scope="session")
def stop_plan(synth_app: SynthFactory, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    reports = tmp_path_factory.mktemp("stop-reports")
    stop = Finding(
        name="invocation_ceiling", verdict="stop", detail="SLO + S_p95 > 60 s", recommendation="-"
    )
    write_plan(reports, make_plan(verdict="stop", queue_max_depth=48, findings=[stop]))
    return synth_app("stop", artifacts_dir=reports)


@pytest.fixture(scope="session")
def scaling_disabled(synth_app: SynthFactory, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    reports = tmp_path_factory.mktemp("disabled-reports")
    write_plan(reports, make_plan(queue_max_depth=48))
    fixed = {MODEL: dataclasses.replace(REGISTRY[MODEL], max_instances=1)}
    return synth_app("disabled", artifacts_dir=reports, registry=fixed)
