"""Text in, audio out: chunking, joining, streaming and timestamps through KokoroTTS.

A stand-in backend keeps these fast: its durations and audio are simple
functions of the token ids, the seed and the style, so the pipeline's
bookkeeping can be checked exactly.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import kokoro_gpu
from kokoro_gpu import api
from kokoro_gpu.api import KokoroTTS
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.errors import InputError, VoiceError
from kokoro_gpu.text.g2p import phonemize
from kokoro_gpu.voices import VoiceStore

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it rests; nobody minds at all. "
WORDS_PER_SENTENCE = 17


class FakeBackend:
    device = "cpu"
    precision = "fp32"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def forward(self, input_ids, ref_s, speed, *, deterministic, seed, trace=None):
        self.calls.append({"ids": input_ids.copy(), "style": ref_s.copy(), "seed": seed})
        durations = (1 + input_ids % 4).astype(np.int64)
        audio = np.repeat(input_ids.astype(np.float32) / 200, durations * 600)
        if not deterministic:
            audio += np.random.default_rng(seed).standard_normal(audio.size).astype(np.float32)
        return audio, durations


@pytest.fixture()
def tts(tmp_path) -> KokoroTTS:
    voices = tmp_path / "voices"
    voices.mkdir()
    for name in ("af_test", "bf_test"):
        # Row r of the pack is filled with r: the style row chosen is visible in ref_s.
        pack = np.broadcast_to(np.arange(510, dtype=np.float32)[:, None, None], (510, 1, 256))
        np.save(voices / f"{name}.npy", np.ascontiguousarray(pack))
    return KokoroTTS(ModelConfig.load(), FakeBackend(), VoiceStore(voices, None))


def _ids(tts: KokoroTTS, phonemes: str) -> list[int]:
    return [0, *(tts.config.vocab[c] for c in phonemes if c in tts.config.vocab), 0]


def test_long_text_is_chunked_and_joined(tts):
    result = tts.synthesize(SENTENCE * 30, voice="af_test", deterministic=True)
    calls = tts.backend.calls
    assert len(calls) > 1
    assert all(len(c["ids"]) <= 512 for c in calls)
    assert len(result.audio) == 600 * int(result.durations.sum())
    assert result.durations.tolist() == [d for c in calls for d in (1 + c["ids"] % 4).tolist()]
    assert [w.word for w in result.words] == [w.strip(",;.") for w in (SENTENCE * 30).split()]
    assert len(result.words) == 30 * WORDS_PER_SENTENCE


def test_timestamps_monotonic_and_cover_the_audio(tts):
    result = tts.synthesize(SENTENCE * 12, voice="af_test", deterministic=True)
    words = result.words
    assert all(w.start < w.end for w in words)
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    assert words[0].start >= 0 and words[-1].end <= result.seconds
    # Together the words and the pauses between them make up the audio: nothing after the last
    # word but the final punctuation and boundary token.
    assert result.seconds - words[-1].end < 0.5


def test_stream_yields_the_same_audio_as_one_shot(tts):
    text = SENTENCE * 12
    one_shot = tts.synthesize(text, voice="af_test", seed=7)
    parts = list(tts.stream(text, voice="af_test", seed=7))
    assert len(parts) > 1
    np.testing.assert_array_equal(np.concatenate([p.audio for p in parts]), one_shot.audio)
    assert [w for p in parts for w in p.words] == one_shot.words
    offset = 0.0
    for part in parts:
        assert all(offset <= w.start and w.end <= offset + part.seconds for w in part.words)
        assert part.text and len(part.phonemes) <= 510
        offset += part.seconds


def test_each_chunk_gets_its_own_seed(tts):
    tts.synthesize(SENTENCE * 12, voice="af_test", seed=7)
    seeds = [c["seed"] for c in tts.backend.calls]
    assert seeds == list(range(7, 7 + len(seeds)))


def test_lines_are_separate_chunks(tts):
    result = tts.synthesize("Chapter one\nIt was dark.", voice="af_test", deterministic=True)
    assert len(tts.backend.calls) == 2
    assert [w.word for w in result.words] == ["Chapter", "one", "It", "was", "dark"]


def test_phonemes_pass_through_exactly(tts):
    phonemes = "h\u0259l\u02c8O w\u02c8\u025c\u0279ld"
    result = tts.synthesize(phonemes=phonemes, voice="af_test", deterministic=True)
    (call,) = tts.backend.calls
    assert call["ids"].tolist() == _ids(tts, phonemes)
    assert np.all(call["style"] == len(phonemes) - 1)  # pack row len(ps) - 1
    assert result.phonemes == phonemes
    assert [w.word for w in result.words] == phonemes.split()


def test_long_phonemes_are_chunked(tts):
    phonemes = " ".join(["h\u0259l\u02c8O"] * 150)  # 899 characters
    result = tts.synthesize(phonemes=phonemes, voice="af_test", deterministic=True)
    assert len(tts.backend.calls) == 2
    assert all(len(c["ids"]) <= 512 for c in tts.backend.calls)
    assert len(result.words) == 150


def test_lang_defaults_to_the_voice(tts):
    result = tts.synthesize("Hello.", voice="bf_test", deterministic=True)
    assert result.phonemes == phonemize("Hello.", "b") != phonemize("Hello.", "a")


def test_voice_of_another_language_warns(tts):
    with pytest.warns(UserWarning, match="accent"):
        result = tts.synthesize("Hello.", voice="af_test", lang="en-gb", deterministic=True)
    assert result.phonemes == phonemize("Hello.", "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tts.synthesize("Hello.", voice="af_test", lang="en-us", deterministic=True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"text": "hi", "phonemes": "h\u02c8I"}, InputError, "either text or phonemes"),
        ({}, InputError, "either text or phonemes"),
        ({"text": "  \n"}, InputError, "empty"),
        ({"text": "hi", "speed": 0}, InputError, "speed"),
        ({"text": "hi", "speed": "fast"}, InputError, "speed"),
        ({"text": "hi", "lang": "xx"}, InputError, "unknown language"),
        ({"text": "hi", "voice": "zz_nobody"}, VoiceError, "unknown voice"),
    ],
)
def test_bad_arguments_fail_before_streaming(tts, kwargs, error, match):
    kwargs.setdefault("voice", "af_test")
    text = kwargs.pop("text", None)
    with pytest.raises(error, match=match):
        tts.stream(text, **kwargs)
    assert not tts.backend.calls


def test_text_without_phonemes(tts):
    with pytest.raises(InputError, match="no phonemes"):
        tts.synthesize("$", voice="af_test")


def test_module_level_synthesize_caches_the_model(tts, monkeypatch):
    loads = []

    def fake_load(model, device="auto", precision="fp32"):
        loads.append((model, device, precision))
        return tts

    monkeypatch.setattr(KokoroTTS, "from_pretrained", staticmethod(fake_load))
    api._cached_model.cache_clear()
    try:
        first = kokoro_gpu.synthesize("Hi.", voice="af_test", model="some/dir", device="cpu", seed=1)
        second = kokoro_gpu.synthesize(phonemes="h\u02c8I", voice="af_test", model="some/dir", device="cpu")
    finally:
        api._cached_model.cache_clear()
    assert loads == [("some/dir", "cpu", "fp32")]
    assert first.words[0].word == "Hi" and second.phonemes == "h\u02c8I"
    assert kokoro_gpu.WordTimestamp is api.WordTimestamp


def test_stream_matches_one_shot_on_the_cpu_model(tmp_path):
    from kokoro_gpu.random_weights import write_model_dir

    tts = KokoroTTS.from_pretrained(write_model_dir(tmp_path, seed=1, voices=["af_heart"]), device="cpu")
    text = "Hi.\nGo!"  # two lines: two chunks
    one_shot = tts.synthesize(text, voice="af_heart", seed=5)
    parts = list(tts.stream(text, voice="af_heart", seed=5))
    assert len(parts) == 2
    np.testing.assert_array_equal(np.concatenate([p.audio for p in parts]), one_shot.audio)
    assert len(one_shot.audio) == 600 * int(one_shot.durations.sum())
    assert [w.word for w in one_shot.words] == ["Hi", "Go"]
    assert one_shot.words[1].start >= parts[0].seconds
