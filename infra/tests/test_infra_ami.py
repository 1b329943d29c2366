"""The GPU variant's InferenceAmiVersion: from botocore's model, a driver for the image's CUDA."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.optional import needs_extra

pytest.importorskip("boto3", reason=needs_extra("boto3"))

import re
from pathlib import Path

import botocore.session
from speech_infra.ami import MIN_DRIVER, gpu_ami_versions, image_cuda, inference_ami_version

DOCKERFILE = Path(__file__).resolve().parents[2] / "container" / "Dockerfile"


def test_every_gpu_ami_of_botocores_model_is_read_with_its_driver_and_cuda() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    enum = model.shape_for("ProductionVariant").members["InferenceAmiVersion"].enum
    found = {ami.name: ami for ami in gpu_ami_versions()}
    assert set(found) == {name for name in enum if "-gpu-" in name}
    assert all(ami.driver >= 470 and ami.cuda[0] >= 11 for ami in found.values())


def test_the_images_cuda_is_what_its_torch_wheel_is_built_for() -> None:
    cuda = image_cuda(DOCKERFILE)
    assert cuda == (12, 6)
    # The torch index is derived from the same ARG, so the two cannot drift apart.
    assert re.search(r"download\.pytorch\.org/whl/\$\{CUDA_TAG\}", DOCKERFILE.read_text())


def test_a_gpu_instance_gets_the_newest_driver_that_runs_the_images_cuda() -> None:
    name = inference_ami_version("ml.g5.xlarge", image_cuda(DOCKERFILE))
    assert name == "al2-ami-sagemaker-inference-gpu-3-1"
    chosen = next(ami for ami in gpu_ami_versions() if ami.name == name)
    assert chosen.cuda[0] == 12
    assert chosen.driver >= MIN_DRIVER[12]
    assert inference_ami_version("ml.p4d.24xlarge", (12, 2)) == name


def test_cpu_instances_keep_the_default_and_an_unsupported_cuda_is_refused() -> None:
    assert inference_ami_version("ml.c7i.xlarge", (12, 6)) is None
    with pytest.raises(ValueError, match=r"runs CUDA 13\.0"):
        inference_ami_version("ml.g5.xlarge", (13, 0))


def test_a_dockerfile_without_the_cuda_arg_is_an_error(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu:24.04\n")
    with pytest.raises(ValueError, match="ARG CUDA_VERSION"):
        image_cuda(dockerfile)
