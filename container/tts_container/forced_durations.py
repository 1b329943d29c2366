"""The trained model's durations, forced into the untrained model (``FORCE_DURATIONS=FILE``).

A machine that cannot hold the trained weights (a GPU box that reaches no registry) can still
run the untrained development model of the same graph. Its own durations are arbitrary, so its
decoder computes audio of the wrong length; with the trained model's per-token durations forced in
(recorded by ``benchmarks/record_durations.py`` for every segment a benchmark workload sends), it
computes the trained model's frames, so its compute matches the trained model's.

The file is keyed by what the model sees: voice, speed and the segment's phoneme string. A voice
the untrained model has (af_heart, ...) maps to the trained voice that spoke its texts. A segment
not in the file runs on the predictor's own durations and is counted and named: once per segment
in the log, and in ``/ping``'s ``X-TTS-Durations-Missed`` header.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = "trained-durations/1"


class ForcedDurationsError(ValueError):
    """The durations file cannot be used; the message names the file and the field."""


def segment_key(voice: str, speed: float, phonemes: str) -> str:
    """What the model sees, as one string: voice, speed, phonemes (last: they may hold ``|``)."""
    return f"{voice}|{speed:g}|{phonemes}"


class ForcedDurations:
    """Recorded durations by segment, and the count of segments asked for that it lacked."""

    def __init__(
        self,
        source: str,
        weights: str,
        weights_sha256: str,
        voices: dict[str, str],
        segments: dict[str, list[int]],
    ) -> None:
        self.source = source
        self.weights = weights
        self.weights_sha256 = weights_sha256
        self.voices = voices
        self.segments = segments
        self._lock = threading.Lock()
        self.forced = 0
        self.missed = 0
        self._missed_keys: set[str] = set()

    @classmethod
    def load(cls, path: Path) -> ForcedDurations:
        """The file at ``path``; `ForcedDurationsError` names the field that is wrong."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ForcedDurationsError(f"FORCE_DURATIONS: no file {path}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ForcedDurationsError(f"FORCE_DURATIONS: {path} is not JSON: {exc}") from None
        return cls.from_json(data, str(path))

    @classmethod
    def from_json(cls, data: Any, source: str) -> ForcedDurations:
        def bad(field: str, expected: str) -> ForcedDurationsError:
            return ForcedDurationsError(f"FORCE_DURATIONS: {source}: {field} must be {expected}")

        if not isinstance(data, dict):
            raise bad("the top level", "an object")
        if data.get("format") != FORMAT:
            raise bad("format", f"{FORMAT!r} (got {data.get('format')!r})")
        for field in ("weights", "weights_sha256"):
            if not isinstance(data.get(field), str) or not data[field]:
                raise bad(field, "a non-empty string")
        voices = data.get("voices")
        if not isinstance(voices, dict) or not voices:
            raise bad("voices", "an object mapping a served voice to the trained voice")
        for name, trained in voices.items():
            if not isinstance(trained, str) or not trained:
                raise bad(f"voices[{name!r}]", "a voice name")
        segments = data.get("segments")
        if not isinstance(segments, dict) or not segments:
            raise bad("segments", "a non-empty object of 'voice|speed|phonemes' -> durations")
        for key, durations in segments.items():
            parts = key.split("|", 2)
            if len(parts) != 3 or not parts[2]:
                raise bad(f"segments key {key!r}", "'voice|speed|phonemes'")
            if (
                not isinstance(durations, list)
                or not all(isinstance(d, int) and not isinstance(d, bool) for d in durations)
                or min(durations, default=0) < 1
            ):
                raise bad(f"segments[{key!r}]", "a list of whole frame counts >= 1")
            if len(durations) != len(parts[2]) + 2:
                raise bad(
                    f"segments[{key!r}]",
                    f"{len(parts[2]) + 2} durations (one per phoneme and the two boundary "
                    f"tokens), got {len(durations)}",
                )
        return cls(source, data["weights"], data["weights_sha256"], voices, segments)

    def lookup(self, voice: str, speed: float, phonemes: str) -> list[int] | None:
        """The recorded durations of this segment, or None (counted; logged once per segment)."""
        trained = self.voices.get(voice)
        found = None
        if trained is not None:
            found = self.segments.get(segment_key(trained, speed, phonemes))
        with self._lock:
            if found is not None:
                self.forced += 1
                return found
            self.missed += 1
            key = segment_key(voice, speed, phonemes)
            first = key not in self._missed_keys
            self._missed_keys.add(key)
            missed = self.missed
        if first:
            why = "its voice is not in the file" if trained is None else "not recorded"
            log.warning(
                "forced durations: segment not in %s (%s), the predictor's own durations used "
                "(%d missed so far): voice %s, speed %g, phonemes %r",
                self.source,
                why,
                missed,
                voice,
                speed,
                phonemes,
            )
        return None

    def headers(self) -> dict[str, str]:
        """For ``/ping``: how many segments ran on recorded durations, and how many did not."""
        with self._lock:
            return {
                "X-TTS-Durations-Forced": str(self.forced),
                "X-TTS-Durations-Missed": str(self.missed),
            }
