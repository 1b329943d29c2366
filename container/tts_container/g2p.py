"""Grapheme-to-phoneme conversion for English, and for Japanese where its frontend is installed.

English: misaki's English G2P when its spaCy model (en_core_web_sm) is installed; otherwise
``misaki.espeak.EspeakG2P``, which works offline through espeakng-loader. Japanese: misaki's
``JAG2P`` (the G2P Kokoro's Japanese voices were trained with) on fugashi and the UniDic dictionary
bundled in unidic-lite; misaki.ja also imports pyopenjtalk, which pyopenjtalk-plus provides with
its dictionary in the wheel (misaki's own ``[ja]`` extra pulls pyopenjtalk and unidic, which both
download a dictionary at first use and so fail offline). None is documented as thread-safe, so
calls are serialized.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm"
JAPANESE_MODULES = ("pyopenjtalk", "fugashi", "unidic_lite", "jaconv", "mojimoji")
JAPANESE_INSTALL = (
    "pip install 'tts-container[ja]' (pyopenjtalk-plus, fugashi, unidic-lite, jaconv, mojimoji)"
)


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


def japanese_frontend_missing() -> list[str]:
    """The modules of the Japanese frontend that are not installed (none: it can load)."""
    import importlib.util

    return [name for name in JAPANESE_MODULES if importlib.util.find_spec(name) is None]


def load_japanese_g2p() -> G2P | None:
    """misaki's Japanese G2P when its frontend is installed, else None."""
    missing = japanese_frontend_missing()
    if missing:
        log.info("G2P: no Japanese (not installed: %s; %s)", ", ".join(missing), JAPANESE_INSTALL)
        return None
    import contextlib
    import io
    import warnings

    # pyopenjtalk-plus prints a warning at import where onnxruntime (for a reading predictor of
    # its own) is absent; misaki's JAG2P does not use that predictor: kept out of the log.
    with contextlib.redirect_stdout(io.StringIO()):
        from misaki import ja

    with warnings.catch_warnings():
        # misaki reads its word list with importlib.resources.open_text, deprecated in 3.11.
        warnings.filterwarnings(
            "ignore", message="open_text is deprecated", category=DeprecationWarning
        )
        japanese_g2p = ja.JAG2P()  # the cutlet version, Kokoro's own for lang_code 'j'

    def convert_japanese(text: str) -> str:
        phonemes, _tokens = japanese_g2p(text)
        return str(phonemes)

    log.info("G2P: misaki Japanese (fugashi, unidic-lite)")
    return G2P(convert_japanese, "misaki-ja")
