"""One padded, masked Kokoro-82M forward for several segments (batching on a GPU).

kokoro's `KModel.forward_with_tokens` takes one sequence. Here B sequences are padded to the
longest and the padding is kept out of everything that mixes time steps, so each output equals
that sequence's own forward:

- tokens: ALBERT gets the attention mask; kokoro's text and duration encoders already pack
  their LSTMs by length and zero the padding; the duration LSTM runs packed here;
- frames: each alignment is padded with zero columns; the shared F0/N LSTM runs packed; every
  convolution of the prosody predictor and the decoder sees its input zeroed beyond the item's
  frames (what a single sequence's convolution sees as its zero padding), and every instance
  norm takes its statistics over the item's own frames (hooks, active only inside a batch);
- samples: the harmonic source and both STFTs run per item on its own length (cheap next to
  the convolutions), and each output is cut to its length.

In bfloat16 (``decode_in``) the decoder runs under autocast in both paths, the single one
(kokoro's own forward) and the batched one here; everything before it stays float32.

The noise sources of the vocoder draw random numbers per call, so batched and unbatched outputs
agree exactly only with the same noise (the test zeroes it); the speech itself does not change.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_batch = threading.local()  # .frames: per-item frame counts, .max_frames: their maximum
_HOOKED = "_tts_batch_hooks"
_DECODER_AUTOCAST = "_tts_decoder_autocast"  # (device type, dtype) the decoder runs in


def _lengths_at(steps: int) -> torch.Tensor | None:
    """Each item's valid steps in a tensor of ``steps`` time steps, or None outside a batch.

    Every resolution of the prosody predictor and the decoder is a multiple of the frame count
    (plus one after the generator's one-sided reflection pad), so the ceiling is exact.
    """
    frames: torch.Tensor | None = getattr(_batch, "frames", None)
    if frames is None:
        return None
    return torch.div(
        frames * steps + _batch.max_frames - 1, _batch.max_frames, rounding_mode="floor"
    )


def _time_mask(x: torch.Tensor) -> torch.Tensor | None:
    lengths = _lengths_at(x.shape[-1])
    if lengths is None:
        return None
    steps = torch.arange(x.shape[-1], device=x.device)
    return (steps[None, :] < lengths.to(x.device)[:, None]).to(x.dtype)[:, None, :]


def _zero_padding(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    mask = _time_mask(args[0])
    return None if mask is None else (args[0] * mask, *args[1:])


def _masked_instance_norm(
    module: nn.Module, args: tuple[Any, ...], output: torch.Tensor
) -> torch.Tensor | None:
    x = args[0]
    mask = _time_mask(x)
    if mask is None:
        return None
    count = mask.sum(-1, keepdim=True)
    mean = (x * mask).sum(-1, keepdim=True) / count
    var = (((x - mean) * mask) ** 2).sum(-1, keepdim=True) / count
    assert isinstance(module, nn.InstanceNorm1d)
    y = (x - mean) / torch.sqrt(var + module.eps)
    if module.affine:
        y = y * module.weight[None, :, None] + module.bias[None, :, None]
    return y


def decode_in(model: Any, precision: str) -> None:
    """Once per model: its decoder computes in ``precision`` (float32 or bfloat16), its output
    float32; the text encoders, durations and prosody stay float32 (same audio length)."""
    if precision == "float32" or hasattr(model.decoder, _DECODER_AUTOCAST):
        return
    decoder = model.decoder
    autocast = (next(decoder.parameters()).device.type, getattr(torch, precision))
    plain_forward = decoder.forward

    def forward(*args: Any, **kwargs: Any) -> torch.Tensor:
        with torch.autocast(*autocast):
            output: torch.Tensor = plain_forward(*args, **kwargs)
        return output.float()

    decoder.forward = forward
    setattr(decoder, _DECODER_AUTOCAST, autocast)


def _install_hooks(model: Any) -> None:
    """Once per model: the masking hooks on the frame-level modules (no-ops outside a batch)."""
    if getattr(model, _HOOKED, False):
        return
    predictor = model.predictor
    frame_level: list[nn.Module] = [
        predictor.F0,
        predictor.N,
        predictor.F0_proj,
        predictor.N_proj,
        model.decoder,
    ]
    for part in frame_level:
        for module in part.modules():
            if isinstance(module, nn.Conv1d | nn.ConvTranspose1d):
                module.register_forward_pre_hook(_zero_padding)
            elif isinstance(module, nn.InstanceNorm1d):
                module.register_forward_hook(_masked_instance_norm)
    setattr(model, _HOOKED, True)


def _packed_lstm(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``lstm`` over batch-first ``x`` with each row cut to its length; zeros beyond it."""
    packed = nn.utils.rnn.pack_padded_sequence(
        x, lengths.cpu(), batch_first=True, enforce_sorted=False
    )
    out, _ = lstm(packed)
    padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return padded


@torch.no_grad()
def forward_batch(
    model: Any,
    phonemes: Sequence[str],
    voice_packs: Sequence[torch.Tensor],
    speeds: Sequence[float],
    durations: Sequence[Sequence[int] | None] | None = None,
) -> list[torch.Tensor]:
    """The audio of each phoneme string (known symbols only), as `KPipeline.infer` makes it;
    where ``durations`` gives a row (frames per token, boundary tokens included), those frames
    replace the duration predictor's."""
    ids = [[model.vocab[p] for p in ps] for ps in phonemes]
    ref_s = torch.cat([pack[len(ps) - 1] for ps, pack in zip(phonemes, voice_packs, strict=True)])
    audio, _ = forward_tokens(model, ids, ref_s, speeds, durations)
    return audio


@torch.no_grad()
def forward_tokens(
    model: Any,
    ids: Sequence[Sequence[int]],
    ref_s: torch.Tensor,
    speeds: Sequence[float],
    durations: Sequence[Sequence[int] | None] | None = None,
    *,
    decode: bool = True,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each item's audio and the durations its predictor gave (one per token, the boundary zeros
    included), from token ids without the boundaries and style rows ``ref_s`` [B, 256]; a row of
    ``durations`` is used in place of its predicted one (the conversion test forces the export's,
    ``FORCE_DURATIONS`` the trained model's). ``decode=False``: the durations alone (cheap)."""
    _install_hooks(model)
    device = model.device
    rows = [[0, *item, 0] for item in ids]
    token_lengths = torch.tensor([len(i) for i in rows], device=device)
    width = int(token_lengths.max())
    input_ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for row, item in enumerate(rows):
        input_ids[row, : len(item)] = torch.tensor(item, device=device)
    ref_s = ref_s.reshape(len(rows), -1).to(device)
    speed = torch.tensor(list(speeds), device=device, dtype=torch.float32)
    text_mask = torch.arange(width, device=device)[None, :] >= token_lengths[:, None]

    # tokens -> durations (kokoro's forward_with_tokens, with masks and packed LSTMs)
    bert_dur = model.bert(input_ids, attention_mask=(~text_mask).int())
    d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
    s = ref_s[:, 128:]
    d = model.predictor.text_encoder(d_en, s, token_lengths, text_mask)
    x = _packed_lstm(model.predictor.lstm, d, token_lengths)
    duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(dim=-1) / speed[:, None]
    predicted = torch.round(duration).clamp(min=1).long().masked_fill(text_mask, 0)
    on_host = predicted.cpu()  # one transfer for the whole batch, not one per item
    own = [on_host[row, : len(item)] for row, item in enumerate(rows)]
    if not decode:
        return [], own
    pred_dur = predicted.clone()
    for row, forced in enumerate(durations or ()):
        if forced is not None:
            if len(forced) != len(rows[row]):
                raise ValueError(
                    f"durations row {row} has {len(forced)} values; its tokens are "
                    f"{len(rows[row])} (boundaries included)"
                )
            pred_dur[row, : len(forced)] = torch.as_tensor(list(forced), device=device)
    frames = pred_dur.sum(-1)
    max_frames = int(frames.max())
    alignment = torch.zeros((len(rows), width, max_frames), device=device)
    for row in range(len(rows)):
        tokens = int(token_lengths[row])
        indices = torch.repeat_interleave(
            torch.arange(tokens, device=device), pred_dur[row, :tokens]
        )
        alignment[row, indices, torch.arange(indices.shape[0], device=device)] = 1
    en = d.transpose(-1, -2) @ alignment
    t_en = model.text_encoder(input_ids, token_lengths, text_mask)
    asr = t_en @ alignment

    _batch.frames, _batch.max_frames = frames, max_frames
    try:
        f0, noise = _f0n(model.predictor, en, s, frames)
        device_type, dtype = getattr(model.decoder, _DECODER_AUTOCAST, ("cpu", None))
        with torch.autocast(device_type, dtype, enabled=dtype is not None):
            audio = _decode(model.decoder, asr, f0, noise, ref_s[:, :128], frames)
        return [wave.float() for wave in audio], own
    finally:
        _batch.frames = None


def _f0n(
    predictor: Any, en: torch.Tensor, s: torch.Tensor, frames: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ProsodyPredictor.F0Ntrain` with the shared LSTM packed by frame count."""
    x = _packed_lstm(predictor.shared, en.transpose(-1, -2), frames).transpose(-1, -2)
    f0 = x
    for block in predictor.F0:
        f0 = block(f0, s)
    noise = x
    for block in predictor.N:
        noise = block(noise, s)
    f0, noise = predictor.F0_proj(f0), predictor.N_proj(noise)
    mask = _time_mask(f0)
    assert mask is not None, "only inside forward_batch"
    return (f0 * mask).squeeze(1), (noise * mask).squeeze(1)


def _decode(
    decoder: Any,
    asr: torch.Tensor,
    f0_curve: torch.Tensor,
    noise: torch.Tensor,
    s: torch.Tensor,
    frames: torch.Tensor,
) -> list[torch.Tensor]:
    """`Decoder.forward`, then the generator with its source and STFTs per item."""
    f0 = decoder.F0_conv(f0_curve.unsqueeze(1))
    n = decoder.N_conv(noise.unsqueeze(1))
    x = decoder.encode(torch.cat([asr, f0, n], dim=1), s)
    asr_res = decoder.asr_res(asr)
    residual = True
    for block in decoder.decode:
        if residual:
            x = torch.cat([x, asr_res, f0, n], dim=1)
        x = block(x, s)
        if block.upsample_type != "none":
            residual = False
    return _generate(decoder.generator, x, s, f0_curve, frames)


def _generate(
    gen: Any, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor, frames: torch.Tensor
) -> list[torch.Tensor]:
    """`Generator.forward` with the harmonic source and both STFTs on each item's own length."""
    upsampled = gen.f0_upsamp(f0[:, None]).transpose(1, 2)
    per_frame = upsampled.shape[1] // f0.shape[1]  # samples per F0 step
    hars = []
    for row in range(x.shape[0]):
        length = int(frames[row]) * 2 * per_frame  # F0 runs at twice the frame rate
        source, _, _ = gen.m_source(upsampled[row : row + 1, :length])
        spec, phase = gen.stft.transform(source.transpose(1, 2).squeeze(1))
        hars.append(torch.cat([spec, phase], dim=1))
    width = max(h.shape[-1] for h in hars)
    har = torch.cat([F.pad(h, (0, width - h.shape[-1])) for h in hars])
    for i in range(gen.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        x_source = gen.noise_res[i](gen.noise_convs[i](har), s)
        x = gen.ups[i](x)
        if i == gen.num_upsamples - 1:
            x = gen.reflection_pad(x)
        x = x + x_source
        xs = None
        for j in range(gen.num_kernels):
            out = gen.resblocks[i * gen.num_kernels + j](x, s)
            xs = out if xs is None else xs + out
        assert xs is not None
        x = xs / gen.num_kernels
    x = gen.conv_post(F.leaky_relu(x))
    bins = gen.post_n_fft // 2 + 1
    spec, phase = torch.exp(x[:, :bins, :]), torch.sin(x[:, bins:, :])
    audio = []
    for row, h in enumerate(hars):
        steps = h.shape[-1]
        wave = gen.stft.inverse(spec[row : row + 1, :, :steps], phase[row : row + 1, :, :steps])
        audio.append(wave.reshape(-1))
    return audio
