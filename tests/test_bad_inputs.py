"""Bad API arguments, config values and error messages: each a one-line KokoroError, never a traceback.

The API cases use a stand-in backend (as tests/test_pipeline.py does) so they
check the argument handling, not the model; the frame bound of the CPU model is
checked on a full-size random checkpoint.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu.api import KokoroTTS
from kokoro_gpu.config import MAX_FRAMES, ModelConfig
from kokoro_gpu.errors import MAX_MESSAGE_CHARS, BackendError, ConfigError, InputError, KokoroError, one_line
from kokoro_gpu.text.chunking import MAX_LINE_CHARS, split_long_line
from kokoro_gpu.text.g2p import Word
from kokoro_gpu.voices import VoiceStore


class FakeBackend:
    device = "cpu"
    precision = "fp32"

    def __init__(self, audio_value: float = 0.0) -> None:
        self.calls: list[dict] = []
        self.audio_value = audio_value

    def forward(self, input_ids, ref_s, speed, *, deterministic, seed, trace=None):
        self.calls.append({"ids": input_ids.copy(), "speed": speed, "seed": seed})
        durations = np.ones(len(input_ids), np.int64)
        return np.full(600 * len(input_ids), self.audio_value, np.float32), durations

    def forward_batch(self, items, *, deterministic):
        return [self.forward(ids, style, speed, deterministic=deterministic, seed=seed)
                for ids, style, speed, seed in items]


@pytest.fixture()
def tts(tmp_path: Path) -> KokoroTTS:
    voices = tmp_path / "voices"
    voices.mkdir()
    np.save(voices / "af_test.npy", np.zeros((510, 1, 256), np.float32))
    return KokoroTTS(ModelConfig.load(), FakeBackend(), VoiceStore(voices, None))


def _message(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and len(message) <= MAX_MESSAGE_CHARS
    return message


BAD_SEEDS = [-1, "abc", 1.5, True, 2**64, [1], np.float32(3.0)]
BAD_SPEEDS = [1e-40, 1e-7, 0.05, 11, 1e30, True, "fast", float("inf"), None]


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_bad_seeds(tts: KokoroTTS, seed: object) -> None:
    with pytest.raises(InputError, match="seed") as info:
        tts.stream(phonemes="h\u02c8I", voice="af_test", seed=seed)  # type: ignore[arg-type]
    _message(info)
    with pytest.raises(InputError, match="seed"):
        tts.synthesize_batch(["h\u02c8I"], voice="af_test", seed=seed)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="batch input 1: seed"):
        tts.synthesize_batch(["h\u02c8I", {"phonemes": "h\u02c8I", "seed": seed}], voice="af_test")
    assert not tts.backend.calls


def test_good_seeds_pass_through(tts: KokoroTTS) -> None:
    tts.synthesize(phonemes="h\u02c8I", voice="af_test", seed=np.int64(5))
    tts.synthesize_batch(["h\u02c8I", {"phonemes": "h\u02c8I", "seed": 2**64 - 1}], voice="af_test", seed=0)
    assert [c["seed"] for c in tts.backend.calls] == [5, 0, 2**64 - 1]


@pytest.mark.parametrize("speed", BAD_SPEEDS)
def test_bad_speeds(tts: KokoroTTS, speed: object) -> None:
    with pytest.raises(InputError, match=r"speed must be a (finite )?number") as info:
        tts.stream(phonemes="h\u02c8I", voice="af_test", speed=speed)  # type: ignore[arg-type]
    _message(info)
    with pytest.raises(InputError, match="speed"):
        tts.synthesize_batch([{"phonemes": "h\u02c8I", "speed": speed}], voice="af_test")
    assert not tts.backend.calls


def test_speed_bounds_are_inclusive_and_named(tts: KokoroTTS) -> None:
    for speed in (0.1, 10):
        tts.synthesize(phonemes="h\u02c8I", voice="af_test", speed=speed)
    with pytest.raises(InputError, match=r"from 0\.1 to 10"):
        tts.synthesize(phonemes="h\u02c8I", voice="af_test", speed=0.0999)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"text": "caf\udce9"}, r"byte 0xe9, which is not UTF-8, at character 3"),
    ({"text": "a\ud800b"}, r"lone surrogate U\+D800"),
    ({"phonemes": "h\udcffI"}, "phonemes has byte 0xff"),
    ({"text": "... !!! ???"}, "no phonemes"),
    ({"phonemes": "... !!! ???"}, "no phonemes"),
])
def test_text_without_speech_or_not_unicode(tts: KokoroTTS, kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        tts.synthesize(voice="af_test", **kwargs)
    _message(info)
    assert not tts.backend.calls


def test_punctuation_only_batch_input(tts: KokoroTTS) -> None:
    with pytest.raises(InputError, match=r"batch input 0: .*no phonemes"):
        tts.synthesize_batch(["?!"], voice="af_test")


def test_non_finite_audio_is_an_error(tts: KokoroTTS) -> None:
    tts.backend.audio_value = float("nan")
    with pytest.raises(BackendError, match="non-finite audio"):
        tts.synthesize(phonemes="h\u02c8I", voice="af_test")
    with pytest.raises(BackendError, match="non-finite audio"):
        tts.synthesize_batch(["h\u02c8I"], voice="af_test")


def test_a_megabyte_line_reaches_the_front_end_in_pieces(tts: KokoroTTS) -> None:
    line = "The quick brown fox jumps over the lazy dog. " * 23_000  # 1 MB, one line
    pieces: list[str] = []

    def front_end(text: str) -> list[Word]:
        pieces.append(text)
        return [Word(w, "f\u0251ks", space=True) for w in text.split()[:3]]

    chunks = list(tts._text_chunks(line, front_end, 510))
    assert max(len(p) for p in pieces) <= MAX_LINE_CHARS
    assert len(pieces) == pytest.approx(len(line) / MAX_LINE_CHARS, rel=0.05)
    assert "".join(pieces).replace(" ", "") == line.replace(" ", "")  # nothing lost or repeated
    assert all(p.endswith("dog.") for p in pieces[:-1])  # cut at sentence ends
    assert chunks


def test_split_long_line_falls_back_to_spaces_then_hard_cuts() -> None:
    assert [len(p) for p in split_long_line("x" * 12_000, 5000)] == [5000, 5000, 2000]
    words = list(split_long_line("word " * 3000, 5000))
    assert all(len(p) <= 5000 and p.endswith("word") for p in words)
    assert list(split_long_line("short line")) == ["short line"]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_cpu_model_bounds_the_predicted_duration(tmp_path: Path) -> None:
    from kokoro_gpu.random_weights import write_model_dir

    tts = KokoroTTS.from_pretrained(write_model_dir(tmp_path, seed=2, voices=["af_heart"]), device="cpu")
    pack = tts.voices.load("af_heart")
    ids, style = tts._model_inputs("h\u02c8I", pack)
    for speed in (1e-7, 1e-40):  # below the API's bound: the model must still refuse, not allocate
        with pytest.raises(InputError, match=f"over {MAX_FRAMES} frames") as info:
            tts.backend.forward(ids, style, speed, deterministic=True, seed=None)
        _message(info)


BASE = json.loads((Path(__file__).parents[1] / "kokoro_gpu" / "data" / "config.json").read_text())


@pytest.mark.parametrize(("edit", "key"), [
    (lambda c: c.update(plbert={}), "plbert"),
    (lambda c: c.update(hidden_dim=0), "hidden_dim"),
    (lambda c: c.update(hidden_dim=-512), "hidden_dim"),
    (lambda c: c.update(hidden_dim=511), "hidden_dim"),
    (lambda c: c.update(hidden_dim="512"), "hidden_dim"),
    (lambda c: c.update(n_token=True), "n_token"),
    (lambda c: c.update(max_dur=10**12), "max_dur"),
    (lambda c: c.pop("style_dim"), "style_dim"),
    (lambda c: c["plbert"].update(num_attention_heads=7), "plbert.hidden_size"),
    (lambda c: c["plbert"].update(max_position_embeddings=2), "plbert.max_position_embeddings"),
    (lambda c: c["istftnet"].update(upsample_rates=[10, 0]), "istftnet.upsample_rates[1]"),
    (lambda c: c["istftnet"].update(upsample_kernel_sizes=[20]), "istftnet.upsample_kernel_sizes"),
    (lambda c: c["istftnet"].update(upsample_initial_channel=128), "istftnet.upsample_initial_channel"),
    (lambda c: c["istftnet"].update(resblock_dilation_sizes=[[1]]), "istftnet.resblock_dilation_sizes"),
    (lambda c: c["vocab"].update(a=5000), "vocab['a']"),
    (lambda c: c.update(dropout="x"), "dropout"),
    (lambda c: c.update(hidden_dim=8192, style_dim=8192), "parameters"),
])
def test_bad_config_values_name_the_key(tmp_path: Path, edit, key: str) -> None:
    config = copy.deepcopy(BASE)
    edit(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        ModelConfig.load(path)
    assert key in _message(info) and str(path) in str(info.value)


@pytest.mark.parametrize("content", [b"[" * 100_000, b"\xff\xfe{}", b"[1, 2]", b" " * (2 << 20)])
def test_unreadable_config_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        ModelConfig.load(path)
    _message(info)


def test_messages_are_one_capped_line() -> None:
    error = KokoroError("bad\nvalue\x00\x1b[31m " + "x" * 5000 + " do this")
    message = str(error)
    assert "\n" not in message and "\x1b" not in message and "\x00" not in message
    assert len(message) == MAX_MESSAGE_CHARS and message.endswith("x do this") and " ... " in message
    assert one_line("caf\udce9 ok") == "caf  ok"
    assert str(InputError("short")) == "short" and isinstance(InputError("x"), ValueError)


def test_cli_refuses_an_endless_input_file(tmp_path, capsys):
    """-i /dev/zero ends in a one-line error after MAX_INPUT_CHARS characters, not in memory."""
    from kokoro_gpu import cli

    code = cli.main(["-i", "/dev/zero", "-o", str(tmp_path / "o.wav")])
    err = capsys.readouterr().err
    assert code == 2 and "over 10,000,000 characters" in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())
