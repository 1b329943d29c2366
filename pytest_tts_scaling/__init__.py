"""pytest-tts-scaling: measured autoscaling for streaming text-to-speech endpoints."""

from __future__ import annotations

__version__ = "0.1.0"
