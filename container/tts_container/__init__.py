"""Streaming Kokoro-82M text-to-speech server for SageMaker real-time endpoints.

Kept cheap to import: torch and kokoro load only when the engine does.
"""

from __future__ import annotations

__version__ = "0.1.0"
