"""What the app reads from CDK context (``-c KEY=VALUE`` or ``CDK_CONTEXT_JSON``).

- ``artifacts_dir`` (default ``reports``): where ``plan-{model}.json`` is looked for. A relative
  path is resolved against the repository root (the parent of ``infra/``), not the working
  directory, so ``cdk synth`` in ``infra/`` and ``python infra/app.py`` from the root read the
  same ``reports/``.
- ``image_uri``: an ECR image URI used instead of building ``container/`` as an image asset. With
  it, synthesis needs no Docker (the tests always set it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from constructs import Node

DEFAULT_ARTIFACTS_DIR = "reports"

_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?"
    r"/(?P<repository>[a-z0-9._/-]+?)(?::[\w.-]+|@sha256:[0-9a-f]{64})?$"
)


@dataclass(frozen=True)
class EcrImage:
    """A prebuilt image: where SageMaker pulls it from, and the repository to grant pull on."""

    uri: str
    account: str
    region: str
    repository: str

    @classmethod
    def parse(cls, uri: str) -> EcrImage:
        match = _ECR_IMAGE.match(uri)
        if not match:
            raise ValueError(
                f"context 'image_uri': expected an ECR image URI like "
                f"123456789012.dkr.ecr.us-east-1.amazonaws.com/repo:tag, got {uri!r}"
            )
        return cls(uri, match["account"], match["region"], match["repository"])


@dataclass(frozen=True)
class AppSettings:
    project_root: Path
    artifacts_dir: Path
    image: EcrImage | None
    container_dir: Path

    @classmethod
    def from_context(cls, node: Node, *, project_root: Path) -> AppSettings:
        raw_dir = node.try_get_context("artifacts_dir") or DEFAULT_ARTIFACTS_DIR
        artifacts_dir = Path(str(raw_dir)).expanduser()
        if not artifacts_dir.is_absolute():
            artifacts_dir = project_root / artifacts_dir
        image_uri = node.try_get_context("image_uri")
        return cls(
            project_root=project_root,
            artifacts_dir=artifacts_dir,
            image=EcrImage.parse(str(image_uri)) if image_uri else None,
            container_dir=project_root / "container",
        )
