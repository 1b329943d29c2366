"""The ttotal step picks its scale timer by the endpoint's kind, each a `ScaleTimer`."""

from __future__ import annotations

import pytest

from pytest_tts_scaling.endpoints.base import UrlEndpoint
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.steps.ttotal import timer_for
from pytest_tts_scaling.steps.ttotal.local import measure_local_ttotal
from pytest_tts_scaling.steps.ttotal.sagemaker import measure_sagemaker_ttotal


class Kind(UrlEndpoint):
    def __init__(self, kind: str) -> None:
        super().__init__("http://127.0.0.1:9")
        self.kind = kind


def test_each_kind_that_scales_has_its_timer() -> None:
    assert timer_for(Kind("local")) is measure_local_ttotal
    assert timer_for(Kind("sagemaker")) is measure_sagemaker_ttotal


def test_a_plain_url_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"^ttotal needs an endpoint it can scale out: .* plain"):
        timer_for(UrlEndpoint("http://127.0.0.1:9"))
