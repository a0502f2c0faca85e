"""Write the small torch fixtures that test kokoro_gpu's restricted .pth reader.

Needs real torch (not a kokoro_gpu dependency). Every tensor starts as a NumPy
array; the arrays are saved beside the .pth files so the tests compare what our
reader returns with what torch was given, not with what our reader once said.

    python scripts/make_pth_fixture.py [OUT_DIR]     (default tests/data/tiny)

Outputs:
- tiny.pth: the five top-level state dicts in the official form (``module.``
  prefix, weight_g / weight_v pairs incl. a ConvTranspose1d one, LSTM tensors,
  views sharing one storage at an offset / transposed, float16, bfloat16, an
  nn.Parameter); tiny_expected.npz holds the same tensors, keyed ``top.key``.
- tiny_param.pth: a ``parametrizations.weight.original0/1`` variant;
  tiny_param_expected.npz likewise.
- tiny_folded.npz: torch's own weight-norm fold (``torch._weight_norm``) of the
  g / v pairs in both files, keyed by the official stem (``top.key`` without
  ``.weight_g``; ``param.`` in front for tiny_param.pth), as an independent
  check of our fold.
- tiny_be.pth: a few tensors with their storages byte-swapped and a ``big``
  byteorder record (what a big-endian machine writes); expected arrays under
  ``be.*`` in tiny_expected.npz. torch.load reads it back as a check.
- voice.pt: a bare float32 tensor [510, 1, 256] given by :func:`voice_pack`.
- evil.pth: a torch.save archive whose pickle calls ``os.system`` to create the
  file ``kokoro_evil_marker`` in the current directory if it is ever unpickled
  by an unrestricted loader.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

EVIL_MARKER = "kokoro_evil_marker"

# The deprecated weight_norm is used on purpose: it writes the weight_g / weight_v
# names of the official checkpoint.
warnings.filterwarnings("ignore", message=".*weight_norm.*deprecated", category=FutureWarning)


def voice_pack() -> np.ndarray:
    """The voice fixture: a closed-form ramp the test recomputes on its own."""
    ramp = (np.arange(510 * 256) % 1009) / 1009.0 - 0.5
    return ramp.astype(np.float32).reshape(510, 1, 256)


def bf16_exact(x: np.ndarray) -> np.ndarray:
    """Float32 values exactly representable in bfloat16 (low 16 mantissa bits cleared)."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def module_state(module: torch.nn.Module, arrays: dict[str, np.ndarray], prefix: str) -> OrderedDict:
    """Load NumPy arrays into a real module and return its state_dict (with torch's _metadata)."""
    module.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
    return module.state_dict(prefix=prefix)


def random_arrays(rng: np.random.Generator, module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in module.state_dict().items()}


def weight_norm_folds(state: dict[str, np.ndarray], g_suffix: str, v_suffix: str) -> dict[str, np.ndarray]:
    out = {}
    for name, g in state.items():
        if name.endswith(g_suffix):
            stem = name[: -len(g_suffix)]
            v = state[stem + v_suffix]
            out[stem] = torch._weight_norm(torch.from_numpy(v), torch.from_numpy(g), 0).numpy()
    return out


def save_official(path: Path, tops: dict[str, dict], flat: dict[str, np.ndarray]) -> None:
    torch.save(tops, path)
    for top, sd in tops.items():
        for key in sd:
            assert f"{top}.{key}" in flat, f"{top}.{key} has no expected array"


def make_tiny(rng: np.random.Generator) -> tuple[dict, dict[str, np.ndarray]]:
    flat: dict[str, np.ndarray] = {}

    word = rng.standard_normal((6, 4)).astype(np.float32)
    half = rng.standard_normal((3, 2)).astype(np.float16)
    bert = OrderedDict([
        ("module.embeddings.word_embeddings.weight", torch.from_numpy(word)),
        ("module.encoder.half.weight", torch.from_numpy(half)),
    ])
    flat["bert.module.embeddings.word_embeddings.weight"] = word
    flat["bert.module.encoder.half.weight"] = half

    enc_w = rng.standard_normal((3, 4)).astype(np.float32)
    enc_b = bf16_exact(rng.standard_normal(3))
    bert_encoder = OrderedDict([
        ("module.weight", torch.nn.Parameter(torch.from_numpy(enc_w))),
        ("module.bias", torch.from_numpy(enc_b).to(torch.bfloat16)),
    ])
    flat["bert_encoder.module.weight"] = enc_w
    flat["bert_encoder.module.bias"] = enc_b

    lstm = torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True)
    lstm_arrays = random_arrays(rng, lstm)
    predictor = module_state(lstm, lstm_arrays, "module.lstm.")
    flat.update({f"predictor.module.lstm.{k}": v for k, v in lstm_arrays.items()})

    conv = torch.nn.utils.weight_norm(torch.nn.Conv1d(4, 5, 3))
    conv_arrays = random_arrays(rng, conv)
    text_encoder = module_state(conv, conv_arrays, "module.cnn.0.0.")
    flat.update({f"text_encoder.module.cnn.0.0.{k}": v for k, v in conv_arrays.items()})
    # Two views into one storage: a slice at an offset and a transpose.
    base = np.arange(20, dtype=np.float32) * 0.25 - 1.0
    shared = torch.from_numpy(base.copy())
    text_encoder["module.shared_offset"] = shared[2:8].view(2, 3)
    text_encoder["module.shared_transposed"] = shared.view(4, 5).t()
    flat["text_encoder.module.shared_offset"] = base[2:8].reshape(2, 3)
    flat["text_encoder.module.shared_transposed"] = base.reshape(4, 5).T.copy()

    ups = torch.nn.utils.weight_norm(torch.nn.ConvTranspose1d(3, 4, 5))
    ups_arrays = random_arrays(rng, ups)
    decoder = module_state(ups, ups_arrays, "module.generator.ups.0.")
    flat.update({f"decoder.module.generator.ups.0.{k}": v for k, v in ups_arrays.items()})

    tops = {"bert": bert, "bert_encoder": bert_encoder, "predictor": predictor,
            "text_encoder": text_encoder, "decoder": decoder}
    return tops, flat


def make_param(rng: np.random.Generator) -> tuple[dict, dict[str, np.ndarray]]:
    wn = torch.nn.utils.parametrizations.weight_norm
    flat: dict[str, np.ndarray] = {}
    tops: dict[str, dict] = {}
    for top, prefix, module in (
        ("text_encoder", "module.cnn.0.0.", wn(torch.nn.Conv1d(4, 5, 3))),
        ("decoder", "module.generator.ups.0.", wn(torch.nn.ConvTranspose1d(3, 4, 5))),
    ):
        arrays = random_arrays(rng, module)
        tops[top] = module_state(module, arrays, prefix)
        flat.update({f"{top}.{prefix}{k}": v for k, v in arrays.items()})
    return tops, flat


def make_big_endian(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f16": rng.standard_normal(4).astype(np.float16),
        "i64": rng.integers(-(2**40), 2**40, size=3, dtype=np.int64),
        "bf16": bf16_exact(rng.standard_normal(5)),
    }
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    tensors["bf16"] = tensors["bf16"].to(torch.bfloat16)
    buf = io.BytesIO()
    torch.save(tensors, buf)
    # torch numbers storages "0", "1", ... in pickling order, i.e. dict order here.
    itemsize = {k: t.element_size() for k, t in tensors.items()}
    sizes = dict(zip((str(i) for i in range(len(tensors))), itemsize.values(), strict=True))
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            parent, _, leaf = info.filename.rpartition("/")
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif parent.endswith("/data") and leaf in sizes:
                data = np.frombuffer(data, dtype=f"u{sizes[leaf]}").byteswap().tobytes()
            dst.writestr(info, data)
    back = torch.load(path, weights_only=True)
    for k, v in arrays.items():
        assert np.array_equal(back[k].float().numpy() if k == "bf16" else back[k].numpy(), v), k
    return {f"be.{k}": v for k, v in arrays.items()}


class _Evil:
    def __reduce__(self) -> tuple:
        return os.system, (f"touch {EVIL_MARKER}",)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests/data/tiny"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1234)

    tops, flat = make_tiny(rng)
    save_official(out / "tiny.pth", tops, flat)
    folded = weight_norm_folds(flat, ".weight_g", ".weight_v")

    ptops, pflat = make_param(rng)
    save_official(out / "tiny_param.pth", ptops, pflat)
    np.savez(out / "tiny_param_expected.npz", **pflat)
    pfolded = weight_norm_folds(pflat, ".parametrizations.weight.original0",
                                ".parametrizations.weight.original1")
    folded.update({f"param.{k}": v for k, v in pfolded.items()})
    np.savez(out / "tiny_folded.npz", **folded)

    flat.update(make_big_endian(out / "tiny_be.pth", rng))
    np.savez(out / "tiny_expected.npz", **flat)

    torch.save(torch.from_numpy(voice_pack()), out / "voice.pt")
    torch.save({"weight": torch.zeros(2), "payload": _Evil()}, out / "evil.pth")
    for f in sorted(out.iterdir()):
        print(f"{f.stat().st_size:>9}  {f}")


if __name__ == "__main__":
    main()
