"""Reference servers whose true Q_max is known, and that truth, for checking qmax end to end."""

from pytest_tts_scaling.calibration.disciplines import (
    Batching,
    Discipline,
    Faults,
    RandomSlots,
    Slots,
)
from pytest_tts_scaling.calibration.server import SerialStreamServer

__all__ = ["Batching", "Discipline", "Faults", "RandomSlots", "SerialStreamServer", "Slots"]
