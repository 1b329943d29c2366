"""Grapheme-to-phoneme conversion for English.

misaki's English G2P when its spaCy model (en_core_web_sm) is installed; otherwise
``misaki.espeak.EspeakG2P``, which works offline through espeakng-loader. Neither is documented as
thread-safe, so calls are serialized.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm"


def spacy_model_installed(name: str = SPACY_MODEL) -> bool:
    try:
        import spacy.util
    except ImportError:
        return False
    return bool(spacy.util.is_package(name))


class G2P:
    """``g2p(text) -> phonemes`` in Kokoro's phoneme alphabet."""

    def __init__(self, convert: Callable[[str], str], name: str) -> None:
        self._convert = convert
        self._lock = threading.Lock()
        self.name = name

    def __call__(self, text: str) -> str:
        with self._lock:
            return self._convert(text).strip()


def load_g2p(prefer_misaki: bool | None = None) -> G2P:
    """The best English G2P available offline."""
    use_misaki = spacy_model_installed() if prefer_misaki is None else prefer_misaki
    if use_misaki:
        from misaki import en, espeak

        misaki_g2p = en.G2P(trf=False, british=False, fallback=espeak.EspeakFallback(False), unk="")

        def convert_misaki(text: str) -> str:
            phonemes, _tokens = misaki_g2p(text)
            return str(phonemes)

        log.info("G2P: misaki English (spaCy %s)", SPACY_MODEL)
        return G2P(convert_misaki, "misaki-en")

    from misaki.espeak import EspeakG2P

    espeak_g2p = EspeakG2P(language="en-us")
    # phonemizer warns on every call whose punctuation changes its word count: noise here.
    logging.getLogger("phonemizer").setLevel(logging.ERROR)

    def convert_espeak(text: str) -> str:
        phonemes, _ = espeak_g2p(text)
        return str(phonemes)

    log.info("G2P: espeak-ng (spaCy model %s not installed)", SPACY_MODEL)
    return G2P(convert_espeak, "espeak")
