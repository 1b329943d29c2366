"""The offline development model: an untrained Kokoro-82M of the real architecture.

Built once (seeded, so always the same weights) into ``<cache>/dev-model-<hash>/`` as the same
files a real model has (config.json, kokoro-dev.pth, voices/*.pt) and loaded from there like one.
The key hashes the config and every build parameter, so a change builds a new directory.

Untrained weights make noise, not speech, at the real model's compute cost; the duration head is
set so each phoneme token gets about `FRAMES_PER_TOKEN` frames (25 ms each), so audio length and
synthesis time per phoneme are in the range of the trained model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from tts_container.model_files import ModelFiles, find_model_files, packaged_config
from tts_container.settings import UNTRAINED_LABEL

log = logging.getLogger(__name__)

BUILD_VERSION = 1
SEED = 20250101
VOICES = ("af_heart", "af_bella", "am_adam")
VOICE_SHAPE = (510, 1, 256)
VOICE_SCALE = 0.3
FRAMES_PER_TOKEN = 3.5  # mean; with the small random weights tokens get 3 or 4 frames
DURATION_WEIGHT_STD = 0.05
WEIGHTS_NAME = "kokoro-dev.pth"
MANIFEST_NAME = "manifest.json"


def build_key() -> str:
    """A hash over everything that decides the built files."""
    digest = hashlib.sha256(packaged_config().read_bytes())
    params = [BUILD_VERSION, SEED, VOICES, VOICE_SHAPE, VOICE_SCALE, FRAMES_PER_TOKEN]
    digest.update(json.dumps([*params, DURATION_WEIGHT_STD]).encode())
    return digest.hexdigest()[:16]


def dev_model_dir(cache_dir: Path) -> Path:
    return cache_dir / f"dev-model-{build_key()}"


def ensure_dev_model(cache_dir: Path) -> ModelFiles:
    """The development model's files: from the cache when built before, else built now."""
    target = dev_model_dir(cache_dir)
    if (target / MANIFEST_NAME).is_file():
        log.info("development model: reusing %s", target)
    else:
        build_dev_model(target)
    return replace(find_model_files(target), label=UNTRAINED_LABEL)


def build_kokoro_modules(config: dict[str, Any]) -> dict[str, Any]:
    """Fresh modules under the five top-level keys of a Kokoro ``.pth``, as `KModel` builds them."""
    import torch
    from kokoro.istftnet import Decoder
    from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
    from transformers import AlbertConfig

    with warnings.catch_warnings():
        # Kokoro's own layers: an LSTM with dropout and one layer, and the old weight_norm.
        warnings.filterwarnings("ignore", message="dropout option adds dropout after all")
        warnings.filterwarnings("ignore", message=r"`torch.nn.utils.weight_norm` is deprecated")
        bert = CustomAlbert(AlbertConfig(vocab_size=config["n_token"], **config["plbert"]))
        return {
            "bert": bert,
            "bert_encoder": torch.nn.Linear(bert.config.hidden_size, config["hidden_dim"]),
            "predictor": ProsodyPredictor(
                style_dim=config["style_dim"],
                d_hid=config["hidden_dim"],
                nlayers=config["n_layer"],
                max_dur=config["max_dur"],
                dropout=config["dropout"],
            ),
            "text_encoder": TextEncoder(
                channels=config["hidden_dim"],
                kernel_size=config["text_encoder_kernel_size"],
                depth=config["n_layer"],
                n_symbols=config["n_token"],
            ),
            "decoder": Decoder(
                dim_in=config["hidden_dim"],
                style_dim=config["style_dim"],
                dim_out=config["n_mels"],
                **config["istftnet"],
            ),
        }


def remove_abandoned_builds(cache_dir: Path, older_than_s: float = 3600.0) -> None:
    """Delete build directories left by processes killed mid-build (other builds are younger)."""
    now = time.time()
    for leftover in cache_dir.glob(".building-*"):
        with contextlib.suppress(OSError):
            if now - leftover.stat().st_mtime > older_than_s:
                shutil.rmtree(leftover, ignore_errors=True)


def publish_model_dir(
    workdir: Path,
    target: Path,
    state: dict[str, Any],
    weights_name: str,
    voices: dict[str, Any],
    manifest: dict[str, Any],
    *,
    what: str,
) -> None:
    """Write a model directory into ``workdir`` (config, weights, voice packs, the manifest last)
    and rename it to ``target``: a reader sees a whole directory or none; when another process
    renamed its own first, that one is kept."""
    import torch

    shutil.copyfile(packaged_config(), workdir / "config.json")
    torch.save(state, workdir / weights_name)
    (workdir / "voices").mkdir()
    for name, pack in voices.items():
        torch.save(pack, workdir / "voices" / f"{name}.pt")
    (workdir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    if target.exists() and not (target / MANIFEST_NAME).is_file():
        shutil.rmtree(target)  # left by something else than this atomic build
    try:
        os.rename(workdir, target)
    except OSError:
        if not (target / MANIFEST_NAME).is_file():
            raise
        log.info("%s: another process built %s first", what, target)


def build_dev_model(target: Path) -> None:
    """Build the files into ``target`` atomically (a temporary directory renamed into place)."""
    import torch

    log.warning("development model: building untrained Kokoro-82M into %s (once)", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_builds(target.parent)
    config = json.loads(packaged_config().read_text(encoding="utf-8"))
    workdir = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(SEED)
        try:
            modules = build_kokoro_modules(config)
            projection = modules["predictor"].duration_proj.linear_layer
            per_output = FRAMES_PER_TOKEN / config["max_dur"]
            with torch.no_grad():
                # duration = sum over max_dur outputs of sigmoid(W x + b), x from an LSTM (|x| < 1)
                projection.weight.normal_(0.0, DURATION_WEIGHT_STD)
                projection.bias.fill_(math.log(per_output / (1.0 - per_output)))
            voices = {name: torch.randn(VOICE_SHAPE) * VOICE_SCALE for name in VOICES}
        finally:
            torch.random.set_rng_state(generator_state)
        state = {key: module.state_dict() for key, module in modules.items()}
        parameters = sum(p.numel() for m in modules.values() for p in m.parameters())
        manifest = {"key": build_key(), "untrained": True, "parameters": parameters, "seed": SEED}
        publish_model_dir(
            workdir, target, state, WEIGHTS_NAME, voices, manifest, what="development model"
        )
    finally:
        if workdir.exists():
            shutil.rmtree(workdir, ignore_errors=True)
