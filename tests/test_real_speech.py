"""The engine speaks: a speech round trip on real weights, judged by Whisper base.

The sentence set (tests/data/speech_sentences.json: eight everyday English
sentences and three Japanese ones, each read with jf_alpha and jm_kumo) is
synthesized with kokoro-onnx's int8 Kokoro (``kokoro_gpu.real_model``) and
transcribed offline by Whisper base (tests/asr.py). English must come back
with a word error rate of at most 10 % over the set, Japanese with a
character error rate of at most 15 % (Whisper's choice between kanji and kana
spellings of the same sounds counts against it). Fast precision must give
the same English transcripts as fp32 on the same device. The per-utterance
transcripts are printed and written (transcripts.json / .md) under
``$KOKORO_REPORT_DIR`` when set, else under pytest's temporary directory.
The synthesis and the table are scripts/speech_check.py's, so the device run
(``speech_check.py synth`` there, ``transcribe`` here) reports the same numbers.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from real_weights import real_model_or_skip
from script_modules import load_script

from kokoro_gpu.errors import BackendError
from kokoro_gpu.ops import bf16

pytestmark = pytest.mark.real

speech = load_script("speech_check")
parity = load_script("parity_table")

ENGLISH_MAX_WER = 0.10
JAPANESE_MAX_CER = 0.15
# The CPU's fast precision needs bf16 GEMMs (oneMKL and a CPU with BF16 instructions).
NEEDS_BF16 = pytest.mark.skipif(bf16.unavailable_reason() is not None,
                                reason=f"CPU fast precision unavailable: {bf16.unavailable_reason()}")
RUNS = [
    pytest.param("cpu", "fp32", id="cpu-fp32"),
    pytest.param("cpu", "fast", id="cpu-fast", marks=NEEDS_BF16),
    pytest.param("cuda", "fp32", id="cuda-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", "fast", id="cuda-fast", marks=pytest.mark.gpu),
]


@functools.cache
def _model_dir() -> Path:
    """The real model: $KOKORO_REAL_MODEL (a machine without its PyPI packages), else the packages'."""
    explicit = os.environ.get(parity.REAL_MODEL_ENV)
    return Path(explicit) if explicit else real_model_or_skip()


@functools.cache
def _asr_ready() -> None:
    import asr

    try:
        asr.require_asr()
    except asr.ASRUnavailable as e:
        pytest.skip(str(e))


@functools.cache
def _round_trip(device: str, precision: str) -> tuple[speech.Transcribed, ...]:
    """The sentence set synthesized on one backend and transcribed (once per session)."""
    from kokoro_gpu.api import KokoroTTS

    model_dir = _model_dir()
    _asr_ready()
    try:
        tts = KokoroTTS.from_pretrained(model_dir, device=device, precision=precision)
    except BackendError as e:
        pytest.skip(f"{device} backend unavailable: {e}")
    results = speech.synthesize_set(tts, speech.utterances())
    return tuple(speech.transcribe_items([(r.utterance, r.audio) for r in results]))


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    explicit = os.environ.get("KOKORO_REPORT_DIR")
    return Path(explicit) if explicit else tmp_path_factory.mktemp("speech_report")


@pytest.mark.parametrize(("device", "precision"), RUNS)
def test_round_trip(device: str, precision: str, report_dir: Path) -> None:
    rows = list(_round_trip(device, precision))
    title = f"kokoro-onnx-int8 on {device} ({precision}), seed {speech.DEFAULT_SEED}"
    speech.write_report(rows, report_dir / f"speech_{device}_{precision}", title)
    print("\n" + speech.report_markdown(rows, title))
    assert {r.language for r in rows} == {"en", "ja"}
    wer, cer = speech.pooled(rows, "en"), speech.pooled(rows, "ja")
    assert wer <= ENGLISH_MAX_WER, f"English WER {wer:.1%} on {device} ({precision})"
    assert cer <= JAPANESE_MAX_CER, f"Japanese CER {cer:.1%} on {device} ({precision})"


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=NEEDS_BF16),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_fast_transcripts_equal_fp32(device: str) -> None:
    import asr

    fp32 = {r.id: asr.normalize_english(r.transcript) for r in _round_trip(device, "fp32")
            if r.language == "en"}
    fast = {r.id: asr.normalize_english(r.transcript) for r in _round_trip(device, "fast")
            if r.language == "en"}
    differ = [f"{k}: fp32 {fp32[k]!r}, fast {fast[k]!r}" for k in fp32 if fast[k] != fp32[k]]
    assert not differ, "fast and fp32 transcripts differ:\n" + "\n".join(differ)


def test_asr_normalisation() -> None:
    pytest.importorskip("jiwer", reason="jiwer is not installed (pip install \".[test]\")")
    import asr

    assert asr.normalize_english("It's 7 o'clock -- well, 12:30!") == "its seven oclock well twelve thirty"
    assert asr.normalize_english("The  Quick, brown fox.") == "the quick brown fox"
    kyou_wa_ii = "\u4eca\u65e5\u306f\u3044\u3044"
    assert asr.normalize_japanese("\u4eca\u65e5\u306f\u3001 \u3044\u3044\u3002") == kyou_wa_ii
    scored = asr.score("the quick brown fox", "The quick brown box.")
    assert (scored.errors, scored.length) == (1, 4)
