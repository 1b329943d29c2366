"""What a test adds to the report: typed extras for its row, and the Jinja templates.

One rendering path: every piece of HTML comes from a template in ``templates/``. The notes and
labels here say which model made an artifact; the SVG plots are drawn by
:mod:`pytest_tts_scaling.report.plots`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from pytest_tts_scaling.core.schema import (
    CLOCK_WORDS,
    PlanArtifact,
    QmaxArtifact,
    Stage,
    TtotalArtifact,
)
from pytest_tts_scaling.core.verdicts import verdict_words

if TYPE_CHECKING:
    from pytest_tts_scaling.core.plan import PlanOutcome

UNTRAINED_NOTE = (
    "Measured on the offline development model: an untrained Kokoro-82M of the real "
    "architecture. Its audio is noise; its timings are those of the real network."
)
DEV_MODEL_LABEL = "untrained development model of the real architecture"
SYNTHETIC_NOTE = (
    "Measured on the SYNTHETIC engine (ENGINE=synthetic): no model ran; each forward slept as "
    "the container's cost model says. The figures are the scheduler's, not a model's."
)
SYNTHETIC_LABEL = "SYNTHETIC engine: no model ran"

Artifact = QmaxArtifact | TtotalArtifact | PlanArtifact

_templates = Environment(
    loader=PackageLoader("pytest_tts_scaling.report", "templates"),
    autoescape=select_autoescape(["html", "j2"]),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)


def render(template: str, **context: Any) -> str:
    return _templates.get_template(template).render(**context)


@dataclass(frozen=True)
class Extra:
    kind: Literal["svg", "html", "text"]
    content: str
    name: str


@dataclass(frozen=True)
class Shown:
    """An artifact a test put on the first screen of the report (and on a page of its own)."""

    artifact: Artifact
    path: Path
    outcome: PlanOutcome | None = None


@dataclass
class ReportExtras:
    """What one test adds to the report: extras in its row, artifacts on the first screen."""

    items: list[Extra] = field(default_factory=list)
    shown: list[Shown] = field(default_factory=list)

    def svg(self, data: str, name: str) -> None:
        self.items.append(Extra("svg", base64.b64encode(data.encode()).decode("ascii"), name))

    def html(self, content: str, name: str) -> None:
        self.items.append(Extra("html", content, name))

    def text(self, content: str, name: str) -> None:
        self.items.append(Extra("text", content, name))

    def artifact(self, artifact: Artifact, path: Path, outcome: PlanOutcome | None = None) -> None:
        self.shown.append(Shown(artifact, Path(path), outcome))


def made_by_synthetic_engine(artifact: Artifact) -> bool:
    """The container ran its synthetic engine (a cost model): its config says ENGINE=synthetic."""
    return isinstance(artifact, QmaxArtifact) and artifact.deployed_config.synthetic_engine


def weights_label(artifact: Artifact) -> str | None:
    """Which weights served: a qmax artifact's recorded label, else what its config implies
    (older artifacts); a ttotal or plan artifact's from the qmax run it rests on; None where
    nothing says."""
    if isinstance(artifact, TtotalArtifact):
        return artifact.weights
    if isinstance(artifact, PlanArtifact):
        source = artifact.inputs.qmax_artifact
        return source.weights if source is not None else None
    deployed = artifact.deployed_config
    if deployed.weights is not None:
        return deployed.weights
    if deployed.synthetic_engine:
        return "synthetic"
    if deployed.development_model:
        return "untrained (development)"
    return None


def made_by_dev_model(artifact: Artifact) -> bool:
    """The untrained development model served it.

    A qmax artifact's config says; a ttotal or plan artifact says through the weights it
    records, and an older one (none recorded) through its local slug, the default then.
    """
    if isinstance(artifact, QmaxArtifact):
        return artifact.deployed_config.development_model
    label = weights_label(artifact)
    if label is not None:
        return label.startswith("untrained")
    return artifact.slug.startswith("local-")


def rung_table_html(artifact: QmaxArtifact) -> str:
    """Every rung and every per-request metric: the long tables below the answer, under the
    verdict in the words the terminal says (`verdict_words`)."""
    note = UNTRAINED_NOTE if made_by_dev_model(artifact) else None
    if made_by_synthetic_engine(artifact):
        note = SYNTHETIC_NOTE
    return render(
        "rungs.html.j2",
        artifact=artifact,
        note=note,
        verdict=verdict_words(artifact),
        clock=CLOCK_WORDS[artifact.slo_metric],
    )


def stages_table_html(artifact: TtotalArtifact) -> str:
    return render("stages.html.j2", artifact=artifact, stages=timed_stages(artifact))


def timed_stages(artifact: TtotalArtifact) -> list[Stage]:
    """The stages with their seconds since desired_set; an artifact that holds only the times
    (`at`) is timed by the same assembly ttotal uses."""
    from pytest_tts_scaling.core.timeline import Event, assemble, parse_iso

    if all(s.elapsed_s is not None for s in artifact.stages):
        return list(artifact.stages)
    try:
        events = [Event(s.stage, parse_iso(s.at), s.source, s.bounded) for s in artifact.stages]
        return assemble(events).stages
    except ValueError:
        return list(artifact.stages)  # unknown stages or no desired_set: draw what is timed
