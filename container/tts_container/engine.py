"""Synthesis engines: the `Engine` protocol and the Kokoro engine on torch.

The server only needs `Engine`: the scheduler asks it for a request's segments one at a time
(``pieces``: cheap preparation such as G2P) and runs a batch of segments, from any requests, as
one forward (``synthesize``). Tests give it a small fake with controllable delays; the synthetic
engine (`tts_container.synthetic`) replaces the model by a cost model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from tts_container.cores import CoreShare, auto_workers, cpu_count
from tts_container.device import check_device
from tts_container.request import SynthesisRequest
from tts_container.segmenter import cut_long, split_segments
from tts_container.settings import (
    FIRST_SEGMENT_WORDS,
    TRAINED_MODEL_DIR_LABEL,
    UNTRAINED_FORCED_LABEL,
    Settings,
)
from tts_container.trim import Edges, for_stream, segment_edges

if TYPE_CHECKING:
    import torch

    from tts_container.forced_durations import ForcedDurations
    from tts_container.g2p import G2P

log = logging.getLogger(__name__)

KOKORO_REPO_ID = "hexgrad/Kokoro-82M"
KOKORO_SAMPLE_RATE = 24000
MAX_PHONEMES = 510  # Kokoro's context is 512 tokens, two of them for the boundary tokens
MAX_SEGMENT_CHARS = 300

Samples = npt.NDArray[Any]


class Engine(Protocol):
    """What the server needs from a synthesis engine."""

    @property
    def voices(self) -> Collection[str]: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def unavailable_languages(self) -> Mapping[str, str]:
        """Language codes whose text this engine cannot read here, each with what to install."""
        ...

    def pieces(self, request: SynthesisRequest) -> Iterator[Any]:
        """The request's segments, prepared for ``synthesize``, lazily: one per step."""
        ...

    def synthesize(self, batch: Sequence[Any]) -> list[Samples]:
        """Audio (mono float32 in [-1, 1] or int16) for each piece, in one forward, as decoded
        (the stream trims a piece's edge silence: `tts_container.trim`)."""
        ...


def synthesize_all(engine: Engine, request: SynthesisRequest) -> Iterator[Samples]:
    """One request's audio as the stream sends it, segment by segment, one forward each (warm-up
    and tools)."""
    for piece in engine.pieces(request):
        [audio] = engine.synthesize([piece])
        yield for_stream(audio, piece, engine.sample_rate)


UNTRAINED_BANNER = """
################################################################################
##  UNTRAINED WEIGHTS: this server runs the offline development model, an      ##
##  untrained Kokoro-82M of the real architecture. It makes noise, not speech, ##
##  at the real model's cost. Leave out --weights untrained for speech.        ##
################################################################################"""

ENGLISH_VOICE = "jm_kumo"  # of the trained model's five packs, the one whose English is heard
_ENGLISH_VOICE_NAME = re.compile(r"^[ab][fm]_[a-z]+$")  # Kokoro's American and British voices


class VoiceSet(Collection[str]):
    """The voices a model has; Kokoro's English voice names it lacks (af_heart, the workloads'
    af_bella, am_adam, ...) are accepted and spoken by its English voice. Iterating lists only the
    voices there are, so an unknown voice's 4xx names those."""

    def __init__(self, names: Collection[str]) -> None:
        self._names = tuple(names)
        self.english = ENGLISH_VOICE if ENGLISH_VOICE in self._names else None

    def resolve(self, name: str) -> str | None:
        if name in self._names:
            return name
        if self.english is not None and _ENGLISH_VOICE_NAME.match(name):
            return self.english
        return None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def set_torch_threads(threads: int) -> None:
    """torch's intra-op threads for the calling thread only. The count is per thread, but a
    thread's first parallel use takes the count any thread set last, so that use comes first."""
    import torch

    torch.get_num_threads()
    torch.set_num_threads(threads)


def inference_workers(settings: Settings) -> int:
    """INFERENCE_WORKERS, auto resolved for the device Kokoro will run on (the synthetic engine,
    a GPU's cost model, gets a GPU's one)."""
    if settings.inference_workers is not None:
        return settings.inference_workers
    if settings.engine == "synthetic" or settings.device == "cuda":
        return 1
    if settings.device == "auto":
        import torch

        return auto_workers("cuda" if torch.cuda.is_available() else "cpu", cpu_count())
    return auto_workers(settings.device, cpu_count())


def pick_device(requested: str) -> str:
    import torch

    check_device(requested)  # a GPU instance without a usable GPU fails loudly, never on CPU
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("DEVICE=cuda but torch sees no CUDA device; use DEVICE=auto or cpu")
    return requested


CPU_FLAGS_FILE = Path("/proc/cpuinfo")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: Path = CPU_FLAGS_FILE) -> bool:
    """Whether the CPU multiplies bfloat16 natively (elsewhere torch emulates it, slower)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def pick_precision(requested: str, device: str, cpuinfo: Path = CPU_FLAGS_FILE) -> str:
    """auto: bfloat16 on a CPU with native bfloat16 (measured: a quarter less CPU per text),
    float32 elsewhere (on a GPU bfloat16 is unmeasured)."""
    if requested != "auto":
        return requested
    return "bfloat16" if device == "cpu" and cpu_has_bf16(cpuinfo) else "float32"


@dataclass(frozen=True)
class KokoroPiece:
    """One segment ready for the model: known phoneme symbols, voice and speed; whether it opens
    or closes its request (which says how much of Kokoro's edge silence the stream keeps)."""

    phonemes: str
    voice: str
    speed: float
    opens: bool = True
    closes: bool = True

    @property
    def edges(self) -> Edges:
        return segment_edges(self.phonemes, opens=self.opens, closes=self.closes)


class KokoroText:
    """Kokoro's text side, whatever runs the model: voices, segments and G2P per segment."""

    sample_rate = KOKORO_SAMPLE_RATE

    def __init__(
        self,
        voices: Collection[str],
        g2p: G2P,
        vocab: Mapping[str, int],
        *,
        first_segment_words: int = FIRST_SEGMENT_WORDS,
        japanese_g2p: G2P | None = None,
    ) -> None:
        self._voices = VoiceSet(voices)
        self._g2p = g2p
        self._japanese_g2p = japanese_g2p
        self._vocab = vocab
        self.first_segment_words = first_segment_words

    @property
    def voices(self) -> VoiceSet:
        return self._voices

    @property
    def unavailable_languages(self) -> Mapping[str, str]:
        from tts_container.g2p import JAPANESE_INSTALL

        return {} if self._japanese_g2p is not None else {"j": JAPANESE_INSTALL}

    def phoneme_pieces(self, request: SynthesisRequest) -> Iterator[str]:
        """Phoneme strings of at most 510 known symbols, the first one short; G2P per segment.

        Japanese text is read whole first (it has no spaces between words for the segmenter);
        its phonemes have, so they are segmented like a request's own phonemes.
        """
        source, g2p = request.source, None if request.phonemes is not None else self._g2p
        if g2p is not None and request.lang_code == "j":
            if self._japanese_g2p is None:  # parse_request refuses such a request
                raise ValueError(
                    f"lang_code 'j' needs the Japanese frontend; {self.unavailable_languages['j']}"
                )
            source, g2p = self._japanese_g2p(source), None
        for segment in split_segments(source, self.first_segment_words, MAX_SEGMENT_CHARS):
            phonemes = segment if g2p is None else g2p(segment)
            known = "".join(symbol for symbol in phonemes if symbol in self._vocab)
            for piece in cut_long(known, MAX_PHONEMES):
                if piece.strip():
                    yield piece

    def pieces(self, request: SynthesisRequest) -> Iterator[KokoroPiece]:
        voice = self._voices.resolve(request.voice)
        if voice is None:  # parse_request admits only voices of the set
            raise ValueError(
                f"unknown voice {request.voice!r}; available: {', '.join(self.voices)}"
            )
        pieces = self.phoneme_pieces(request)
        current, opens = next(pieces, None), True
        while current is not None:  # one piece ahead, to know which one closes the request
            following = next(pieces, None)
            yield KokoroPiece(current, voice, request.speed, opens, following is None)
            current, opens = following, False


class KokoroEngine(KokoroText):
    """Kokoro-82M through the ``kokoro`` package's `KModel`, with G2P per segment.

    A batch of one runs kokoro's own path (`KPipeline.infer`); a larger one runs one padded,
    masked forward (`tts_container.kokoro_batch`), as does every batch with ``forced`` durations
    (kokoro's path takes none).
    """

    def __init__(
        self,
        model: Any,
        voice_packs: dict[str, torch.Tensor],
        g2p: G2P,
        *,
        first_segment_words: int = FIRST_SEGMENT_WORDS,
        weights_label: str = TRAINED_MODEL_DIR_LABEL,
        japanese_g2p: G2P | None = None,
        forced: ForcedDurations | None = None,
        cores: CoreShare | None = None,
    ) -> None:
        super().__init__(
            tuple(voice_packs),
            g2p,
            model.vocab,
            first_segment_words=first_segment_words,
            japanese_g2p=japanese_g2p,
        )
        self._model = model
        # None: torch's own thread count (a GPU, or OMP_NUM_THREADS set by the deployment).
        self._cores = cores
        self._voice_packs = voice_packs
        self.forced = forced
        self.weights_label = UNTRAINED_FORCED_LABEL if forced is not None else weights_label

    @property
    def untrained(self) -> bool:
        return self.weights_label.startswith("untrained")

    @property
    def device(self) -> str:
        return str(self._model.device)

    @classmethod
    def load(
        cls, settings: Settings, on_framework_init: Callable[[], None] | None = None
    ) -> KokoroEngine:
        """Import torch and kokoro, find or build the model files, load weights and voices."""
        import torch
        from kokoro import KModel

        if on_framework_init is not None:
            on_framework_init()

        from tts_container.g2p import load_g2p, load_japanese_g2p
        from tts_container.kokoro_batch import decode_in
        from tts_container.model_files import check_weight_keys, resolve_model_files

        forced = None
        if settings.force_durations is not None:
            from tts_container.forced_durations import ForcedDurations

            forced = ForcedDurations.load(settings.force_durations)
        files = resolve_model_files(settings)
        check_weight_keys(files.weights)
        if files.untrained:
            log.warning(UNTRAINED_BANNER)
        device = pick_device(settings.device)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="dropout option adds dropout after all")
            warnings.filterwarnings("ignore", message=r"`torch.nn.utils.weight_norm` is deprecated")
            model = KModel(
                repo_id=KOKORO_REPO_ID, config=str(files.config), model=str(files.weights)
            )
        model = model.to(device).eval()
        precision = pick_precision(settings.precision, device)
        decode_in(model, precision)
        voice_packs = {}
        for name, path in sorted(files.voices.items()):
            pack = torch.load(path, map_location="cpu", weights_only=True)
            if tuple(pack.shape) != (MAX_PHONEMES, 1, 256):
                raise ValueError(
                    f"voice pack {path} has shape {tuple(pack.shape)}; expected (510, 1, 256)"
                )
            voice_packs[name] = pack.to(device)
        log.info(
            "model %s on %s, decoder in %s (weights: %s), voices: %s",
            files.weights,
            device,
            precision,
            files.label,
            ", ".join(voice_packs),
        )
        if forced is not None:
            log.info(
                "weights: %s: %d segments' durations of %s (sha256 %s) forced from %s",
                UNTRAINED_FORCED_LABEL,
                len(forced.segments),
                forced.weights,
                forced.weights_sha256,
                forced.source,
            )
        return cls(
            model,
            voice_packs,
            load_g2p(),
            first_segment_words=settings.first_segment_words,
            weights_label=files.label,
            japanese_g2p=load_japanese_g2p(),
            forced=forced,
            cores=(
                CoreShare(cpu_count(), set_torch_threads)
                if device == "cpu" and "OMP_NUM_THREADS" not in os.environ
                else None
            ),
        )

    def synthesize(self, batch: Sequence[KokoroPiece]) -> list[Samples]:
        import torch

        share = contextlib.nullcontext() if self._cores is None else self._cores.forward()
        with share, torch.inference_mode():
            if len(batch) == 1 and self.forced is None:
                from kokoro import KPipeline

                piece = batch[0]
                pack = self._voice_packs[piece.voice]
                output = KPipeline.infer(self._model, piece.phonemes, pack, piece.speed)
                audios = [output.audio]
            else:
                from tts_container.kokoro_batch import forward_batch

                forced = self.forced
                audios = forward_batch(
                    self._model,
                    [p.phonemes for p in batch],
                    [self._voice_packs[p.voice] for p in batch],
                    [p.speed for p in batch],
                    None
                    if forced is None
                    else [forced.lookup(p.voice, p.speed, p.phonemes) for p in batch],
                )
        return [a.detach().cpu().numpy().astype(np.float32, copy=False) for a in audios]
