"""The inference AMI of a GPU variant: one whose NVIDIA driver runs the image's CUDA.

SageMaker's real-time GPU instances otherwise boot an AMI with an older driver, on which the
image's CUDA 12.6 torch finds no device. The choice is made from botocore's own service model
(the ProductionVariant InferenceAmiVersion enum and the driver and CUDA version each documents),
so a new AMI appears here when botocore ships it. An AMI is usable for an image on CUDA X.Y
when its CUDA is X.Z: the same major version runs through CUDA's minor-version compatibility
(PyTorch's CUDA 12 wheels need driver 525 or newer); the newest driver among them is taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

GPU_INSTANCE_PREFIXES = ("ml.g", "ml.p")
# CUDA minor-version compatibility holds from this driver on, for CUDA 12.
MIN_DRIVER = {12: 525}


@dataclass(frozen=True)
class AmiVersion:
    name: str
    driver: int
    cuda: tuple[int, int]


def gpu_ami_versions() -> list[AmiVersion]:
    """Every GPU AMI botocore's SageMaker model lists, with its driver and CUDA versions."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for("ProductionVariant").members["InferenceAmiVersion"]
    found = []
    for name, body in re.findall(r"<dt>([^<]+)</dt>\s*<dd>(.*?)</dd>", shape.documentation, re.S):
        driver = re.search(r"NVIDIA driver version:\s*(\d+)", body)
        cuda = re.search(r"CUDA version:\s*(\d+)\.(\d+)", body)
        if name in shape.enum and driver and cuda:
            found.append(AmiVersion(name, int(driver[1]), (int(cuda[1]), int(cuda[2]))))
    return found


def image_cuda(dockerfile: Path) -> tuple[int, int]:
    """The CUDA the image's torch is built for: the Dockerfile's `ARG CUDA_VERSION`."""
    match = re.search(r"^ARG CUDA_VERSION=(\d+)\.(\d+)\s*$", dockerfile.read_text(), re.M)
    if match is None:
        raise ValueError(f"{dockerfile}: no `ARG CUDA_VERSION=X.Y`: cannot choose a GPU AMI")
    return int(match[1]), int(match[2])


def is_gpu_instance(instance_type: str) -> bool:
    return instance_type.startswith(GPU_INSTANCE_PREFIXES)


def inference_ami_version(instance_type: str, cuda: tuple[int, int]) -> str | None:
    """The InferenceAmiVersion for this instance type and image CUDA; None off GPU instances."""
    if not is_gpu_instance(instance_type):
        return None
    floor = MIN_DRIVER.get(cuda[0], 0)
    usable = [a for a in gpu_ami_versions() if a.cuda[0] == cuda[0] and a.driver >= floor]
    if not usable:
        raise ValueError(
            f"no SageMaker inference AMI in botocore's model runs CUDA {cuda[0]}.{cuda[1]}: "
            "expected an image on a CUDA that an AMI's driver supports"
        )
    return max(usable, key=lambda a: (a.driver, a.cuda, a.name)).name
