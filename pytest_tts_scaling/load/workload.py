"""What each request says: texts, voices and the request body, chosen deterministically.

Request i of worker w is input number (w + i·N): every rung sends the same mix whatever its
concurrency, and a seeded scenario sends the same inputs on every run.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_tts_scaling.core.decoding import ResponseFormat
from pytest_tts_scaling.core.defaults import DEFAULT_MODEL
from pytest_tts_scaling.core.records import AudioFormat, HangUp, HttpRequest, RequestSpec
from pytest_tts_scaling.errors import InputError
from pytest_tts_scaling.load.scenario import Scenario, template_environment

DEFAULT_TEXTS: tuple[str, ...] = (
    "Your order has shipped and should arrive on Thursday afternoon.",
    "Turn left at the next intersection, then continue for two hundred meters.",
    "The meeting has been moved to three thirty in the small conference room.",
    "Thanks for calling. Please hold while we connect you to the next available agent.",
    "Tomorrow will be mostly sunny with a high of twenty two degrees.",
    "Your verification code is four, seven, one, nine. It expires in ten minutes.",
    "The train to the airport leaves from platform six every fifteen minutes.",
    "Remember to drink some water and take a short break from your screen.",
)
# The local default runs Kokoro-82M on a 2-core CPU at about real time, so its requests are short
# prompts: a ladder then finishes in minutes instead of an hour.
LOCAL_TEXTS: tuple[str, ...] = (
    "Your order has shipped.",
    "Turn left in two hundred meters.",
    "The meeting starts at three.",
    "Please hold for the next agent.",
    "Tomorrow will be sunny.",
    "Your code is four seven one nine.",
)
DEFAULT_VOICES: tuple[str, ...] = ("af_heart",)
# The transports a listener can hang up on: each closes the answer's stream.
HANG_UP_TRANSPORTS = ("response-stream",)


def sample_texts(
    corpus: Sequence[str], *, mean: float, stddev: float, seed: int, count: int
) -> list[str]:
    """`count` texts whose word counts follow N(mean, stddev) (at least one word), cut from the
    corpus in order and wrapping around, so the same seed always gives the same texts."""
    words = " ".join(corpus).split()
    if not words:
        raise ValueError("the text corpus has no words")
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, np.rint(rng.normal(mean, stddev, size=count))).astype(int)
    texts: list[str] = []
    offset = 0
    for length in lengths:
        chunk = [words[(offset + k) % len(words)] for k in range(int(length))]
        offset = (offset + int(length)) % len(words)
        text = " ".join(chunk)
        texts.append(text if text[-1] in ".!?" else text.rstrip(",;:") + ".")
    return texts


@dataclass(frozen=True)
class Workload:
    texts: Sequence[str] = DEFAULT_TEXTS
    voices: Sequence[str] = DEFAULT_VOICES
    speed: float = 1.0
    format: str = "pcm"
    selection: str = "round_robin"
    seed: int = 0
    model: str = DEFAULT_MODEL
    template: Any = None
    response: ResponseFormat | None = None
    audio: AudioFormat = field(default_factory=AudioFormat)
    component: str | None = None
    http: HttpRequest = field(default_factory=HttpRequest)
    # What artifacts keep of the scenario's request (header names, no values); None: the default.
    request_summary: dict[str, object] | None = None
    hang_up: HangUp | None = None

    @classmethod
    def default_for(cls, endpoint_kind: str) -> Workload:
        return cls(texts=LOCAL_TEXTS) if endpoint_kind == "local" else cls()

    @classmethod
    def from_scenario(
        cls, scenario: Scenario, *, model: str, component: str | None = None
    ) -> Workload:
        assert scenario.path is not None
        folder = scenario.path.parent
        corpus = [
            line.strip()
            for entry in scenario.text.corpus
            for line in (folder / entry).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        length = scenario.text.length_words
        texts = (
            sample_texts(
                corpus,
                mean=length.mean,
                stddev=length.stddev,
                seed=scenario.text.seed,
                count=scenario.text.pool_size,
            )
            if length is not None
            else corpus
        )
        request = scenario.request
        http = scenario.http_request()
        hang_up = scenario.listener.hang_up
        template = None
        if request.template is not None:
            template = template_environment(folder).get_template(request.template)
        return cls(
            texts=texts,
            voices=scenario.voices.names,
            speed=request.speed,
            format=request.format,
            selection=scenario.voices.selection,
            seed=scenario.voices.seed,
            model=model,
            template=template,
            response=scenario.response_format(),
            audio=AudioFormat(sample_rate=request.sample_rate),
            component=component or scenario.endpoint.inference_component,
            http=http,
            request_summary=scenario.request_summary(http),
            hang_up=HangUp(hang_up.fraction, hang_up.after_audio_s) if hang_up else None,
        )

    def voice_for(self, index: int) -> str:
        """round_robin: the n-th request gets voice n mod V; random: uniform, seeded per request."""
        if self.selection == "random":
            pick = np.random.default_rng([self.seed, index]).integers(len(self.voices))
            return self.voices[int(pick)]
        return self.voices[index % len(self.voices)]

    def request(self, concurrency: int, worker: int, seq: int) -> RequestSpec:
        index = worker + seq * concurrency
        text = self.texts[index % len(self.texts)]
        voice = self.voice_for(index)
        request_id = uuid.uuid4().hex
        body = {
            "text": text,
            "voice": voice,
            "speed": self.speed,
            "format": self.format,
            "request_id": request_id,
        }
        raw = None
        if self.template is not None:
            raw = self.template.render(
                text=text,
                texts=[text],
                voice=voice,
                model=self.model,
                request_id=request_id,
                speed=self.speed,
                format=self.format,
            ).encode()
        return RequestSpec(
            request_id=request_id,
            body=body,
            audio=self.audio,
            voice=voice,
            text_chars=len(text),
            raw=raw,
            response=self.response,
            component=self.component,
            text=text,
            http=self.http,
            hang_up_after_s=(
                self.hang_up.after_audio_s
                if self.hang_up is not None and self.hang_up.hangs_up(index)
                else None
            ),
        )


def workload_for(
    scenario: Scenario | None,
    *,
    model: str,
    component: str | None,
    transport: str,
    endpoint_kind: str,
) -> Workload:
    """The scenario's workload when --scenario named one, else the built-in texts."""
    if scenario is not None:
        workload = Workload.from_scenario(scenario, model=model, component=component)
        if workload.hang_up is not None and transport not in HANG_UP_TRANSPORTS:
            raise InputError(
                f"{scenario.path}: field 'listener.hang_up': a listener hangs up "
                f"on the response-stream transport; expected --transport response-stream, not "
                f"{transport}"
            )
        return workload
    base = Workload.default_for(endpoint_kind)
    return replace(base, model=model, component=component)
