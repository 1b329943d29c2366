"""``python -m tts_container``: the same as ``tts-serve``."""

from __future__ import annotations

import sys

from tts_container.cli import main

sys.exit(main())
