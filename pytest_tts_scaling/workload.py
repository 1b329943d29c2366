"""What each request says: texts, voices and the request body, chosen deterministically.

Request i of worker w gets text number (w + i·N) mod len(texts), so every rung sends the same
mix whatever its concurrency, and voices rotate round-robin.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tts_scaling.records import AudioFormat, RequestSpec

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


@dataclass(frozen=True)
class Workload:
    texts: Sequence[str] = DEFAULT_TEXTS
    voices: Sequence[str] = DEFAULT_VOICES
    speed: float = 1.0
    format: str = "pcm"

    @classmethod
    def default_for(cls, endpoint_kind: str) -> Workload:
        return cls(texts=LOCAL_TEXTS) if endpoint_kind == "local" else cls()

    def request(self, concurrency: int, worker: int, seq: int) -> RequestSpec:
        index = worker + seq * concurrency
        text = self.texts[index % len(self.texts)]
        voice = self.voices[index % len(self.voices)]
        request_id = uuid.uuid4().hex
        body = {
            "text": text,
            "voice": voice,
            "speed": self.speed,
            "format": self.format,
            "request_id": request_id,
        }
        return RequestSpec(
            request_id=request_id,
            body=body,
            audio=AudioFormat.for_format(self.format),
            voice=voice,
            text_chars=len(text),
        )
