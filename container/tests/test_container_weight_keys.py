"""The weight-key check model_files promises: a ``.pth`` without Kokoro's five keys is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tts_container.model_files import WEIGHT_KEYS, ModelFilesError, check_weight_keys


def save(path: Path, state: object) -> Path:
    torch.save(state, path)
    return path


def test_the_five_kokoro_keys_pass(tmp_path: Path) -> None:
    state = {key: {"weight": torch.zeros(2)} for key in WEIGHT_KEYS}
    check_weight_keys(save(tmp_path / "kokoro.pth", state))


def test_missing_keys_are_named_with_what_was_found(tmp_path: Path) -> None:
    state: dict[str, dict[str, torch.Tensor]] = {"bert": {}, "decoder": {}, "generator": {}}
    path = save(tmp_path / "other.pth", state)
    with pytest.raises(ModelFilesError) as failed:
        check_weight_keys(path)
    message = str(failed.value)
    assert message == (
        f"weights {path} lack the top-level keys bert_encoder, predictor, text_encoder: expected "
        "bert, bert_encoder, predictor, text_encoder, decoder (found: bert, decoder, generator)"
    )


def test_a_file_that_is_not_a_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.pth"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelFilesError, match=r"broken\.pth cannot be read: "):
        check_weight_keys(path)
