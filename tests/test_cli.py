"""kokoro-speak end to end on a local model directory with random weights (no network, no GPU).

The CPU backend takes seconds per utterance at full size, so the few runs that
synthesise share one short input.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from kokoro_gpu import KokoroTTS, SynthesisResult
from kokoro_gpu.cli import _Progress, format_timestamps, main
from kokoro_gpu.errors import BackendError
from kokoro_gpu.text.timestamps import WordTimestamp

PHONEMES = "h\u02c8I."  # "Hi."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from kokoro_gpu.random_weights import write_model_dir

    path = tmp_path_factory.mktemp("model")
    write_model_dir(path, seed=0)
    return path


@pytest.fixture(scope="module")
def voice(model_dir) -> str:
    return sorted(p.stem for p in (model_dir / "voices").iterdir())[0]


@pytest.fixture(scope="module")
def reference(model_dir, voice):
    """The API's synthesis of PHONEMES: what every deterministic CLI run must reproduce."""
    tts = KokoroTTS.from_pretrained(model_dir, device="cpu")
    return tts.synthesize(phonemes=PHONEMES, voice=voice, deterministic=True)


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _pcm16(audio: np.ndarray) -> np.ndarray:
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)


def test_wav_and_srt(tmp_path, capsys, model_dir, voice, reference):
    out, srt = tmp_path / "out.wav", tmp_path / "words.srt"
    out.write_bytes(b"old")
    code, err = _run(capsys, "--phonemes", PHONEMES, "-o", out, "--model", model_dir, "--voice", voice,
                     "--device", "cpu", "--deterministic", "--timestamps", srt, "--overwrite")
    assert code == 0, err
    info = soundfile.info(out)
    assert (info.samplerate, info.channels, info.format) == (24000, 1, "WAV")
    frames = int(reference.durations.sum())
    assert info.frames == 600 * frames
    audio, _ = soundfile.read(out, dtype="int16")
    np.testing.assert_array_equal(audio, _pcm16(reference.audio))
    cue = srt.read_text(encoding="utf-8").splitlines()
    assert cue[0] == "1" and cue[2] == "h\u02c8I." and " --> " in cue[1]
    assert set(tmp_path.iterdir()) == {out, srt}  # no temporary file left behind


def test_raw_pcm_to_stdout(capsysbinary, model_dir, voice, reference):
    code = main(["--phonemes", PHONEMES, "-o", "-", "--model", str(model_dir), "--voice", voice,
                 "--device", "cpu", "--deterministic"])
    captured = capsysbinary.readouterr()
    assert code == 0, captured.err
    pcm = np.frombuffer(captured.out, dtype="<i2")
    np.testing.assert_array_equal(pcm, _pcm16(reference.audio))


def test_text_file_to_flac_with_json_timestamps(tmp_path, capsys, model_dir, voice):
    text_file, out, stamps = tmp_path / "in.txt", tmp_path / "out.flac", tmp_path / "t.json"
    text_file.write_text("Hi.\n", encoding="utf-8")
    code, err = _run(capsys, "-i", text_file, "-o", out, "--model", model_dir, "--voice", voice,
                     "--seed", "3", "--timestamps", stamps)
    assert code == 0, err
    assert "\r" not in err  # no progress bar when stderr is not a terminal
    info = soundfile.info(out)
    assert (info.samplerate, info.channels, info.format) == (24000, 1, "FLAC")
    assert info.frames % 600 == 0
    data = json.loads(stamps.read_text(encoding="utf-8"))
    assert [w["word"] for w in data["words"]] == ["Hi"]
    (word,) = data["words"]
    assert 0 <= word["start"] < word["end"] <= data["duration"]
    assert data["duration"] == pytest.approx(info.frames / 24000, abs=1e-3)


def test_list_voices(capsys, model_dir, voice):
    code = main(["--list-voices", "--model", str(model_dir)])
    out = capsys.readouterr().out.split()
    assert code == 0 and voice in out
    assert out == sorted(p.stem for p in (model_dir / "voices").iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["", "-o", "{tmp}/o.wav"], "empty"),
        (["-i", "{tmp}/blank.txt", "-o", "{tmp}/o.wav"], "empty"),
        (["-i", "{tmp}/missing.txt", "-o", "{tmp}/o.wav"], "cannot read input file"),
        (["-i", "{tmp}", "-o", "{tmp}/o.wav"], "cannot read input file"),
        (["-i", "{tmp}/latin1.txt", "-o", "{tmp}/o.wav"], "cannot read input file"),
        (["hi", "-o", "{tmp}/exists.wav"], "exists; pass --overwrite"),
        (["hi", "-o", "{tmp}/o.mp4"], "unsupported output file extension"),
        (["hi", "-o", "{tmp}/o"], "unsupported output file extension"),
        (["hi", "-o", "{tmp}/no/such/dir/o.wav"], "does not exist"),
        (["hi", "-o", "{tmp}/o.wav", "--timestamps", "{tmp}/t.txt"], "unsupported timestamps"),
        (["hi", "-o", "{tmp}/o.wav", "--timestamps", "{tmp}/exists.srt"], "exists; pass --overwrite"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "0"], "speed"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "-1.5"], "speed"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "nan"], "speed"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "fast"], "speed"),
        (["hi", "-o", "{tmp}/o.wav", "--lang", "xx"], "unknown language"),
        (["hi", "-o", "{tmp}/o.wav", "--seed", "x"], "--seed"),
        (["hi", "-o", "{tmp}/o.wav", "--device", "tpu"], "--device"),
        (["hi"], "no output given"),
        (["hi", "-i", "{tmp}/blank.txt", "-o", "{tmp}/o.wav"], "not both"),
    ],
)
def test_bad_input(tmp_path, capsys, model_dir, argv, message):
    (tmp_path / "blank.txt").write_text(" \n\t\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9".encode("latin-1"))
    (tmp_path / "exists.wav").write_bytes(b"keep")
    (tmp_path / "exists.srt").write_bytes(b"keep")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, err = _run(capsys, *[a.format(tmp=tmp_path) for a in argv], "--model", model_dir)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("kokoro-speak: error: ") and message in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_unknown_voice(tmp_path, capsys, model_dir):
    out = tmp_path / "o.wav"
    code, err = _run(capsys, "hi", "-o", out, "--model", model_dir, "--voice", "zz_nobody", "--device", "cpu")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("kokoro-speak:")]
    assert len(lines) == 1 and "unknown voice 'zz_nobody'" in lines[0]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_failure_midway_leaves_no_file(tmp_path, capsys, monkeypatch):
    class HalfwayTTS:
        def stream(self, text, **kwargs):
            yield SynthesisResult(np.zeros(600, np.float32), 24000, np.array([1]), "h\u02c8I", text="hi")
            raise BackendError("the GPU fell over")

    monkeypatch.setattr(KokoroTTS, "from_pretrained", staticmethod(lambda *a, **k: HalfwayTTS()))
    out = tmp_path / "o.wav"
    code, err = _run(capsys, "hi", "-o", out, "--timestamps", tmp_path / "t.json")
    assert code == 1 and "the GPU fell over" in err
    assert not list(tmp_path.iterdir())


def test_progress_bar_draws_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    bar = _Progress(total=100, stream=term, enabled=term.isatty())

    class Chunk:
        text = "x" * 49

    bar.update(Chunk(), 1.5)
    bar.update(Chunk(), 3.0)
    bar.close()
    frames = term.getvalue().split("\r")[1:]
    assert "50%" in frames[0] and "100%" in frames[1] and frames[1].endswith("\n")


def test_timestamp_formats():
    words = [WordTimestamp("Hi", 0.025, 0.5), WordTimestamp("there", 0.6, 3725.041)]
    srt = format_timestamps(words, 3726.0, ".srt")
    assert srt == "1\n00:00:00,025 --> 00:00:00,500\nHi\n\n2\n00:00:00,600 --> 01:02:05,041\nthere\n"
    data = json.loads(format_timestamps(words, 3726.0, ".json"))
    assert data["words"][0] == {"word": "Hi", "start": 0.025, "end": 0.5}
    assert data["duration"] == 3726.0 and data["sample_rate"] == 24000


def test_help(capsys):
    assert main(["--help"]) == 0
    assert "kokoro-speak" in capsys.readouterr().out
