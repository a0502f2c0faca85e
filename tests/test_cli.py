"""kokoro-speak end to end on a local model directory with random weights (no network, no GPU).

The CPU backend takes seconds per utterance at full size, so the few runs that
synthesise share one short input.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
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
        (["hi", "-o", "{tmp}/o.wav", "--seed", "-1"], "seed must be from 0 to 2**64 - 1"),
        (["hi", "-o", "{tmp}/o.wav", "--seed", str(2**64)], "seed must be"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "1e-40"], "speed must be a finite number from 0.1 to 10"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "1e-7"], "speed"),
        (["hi", "-o", "{tmp}/o.wav", "--speed", "11"], "speed"),
        (["caf\udce9", "-o", "{tmp}/o.wav"], "byte 0xe9, which is not UTF-8"),
        (["hi", "-o", "{tmp}/fifo.wav", "--overwrite"], "is not a regular file"),
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
    os.mkfifo(tmp_path / "fifo.wav")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert (tmp_path / "fifo.wav").is_fifo()
    code, err = _run(capsys, *[a.format(tmp=tmp_path) for a in argv], "--model", model_dir)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("kokoro-speak: error: ") and message in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert (tmp_path / "fifo.wav").is_fifo()


def test_unknown_voice(tmp_path, capsys, model_dir):
    out = tmp_path / "o.wav"
    code, err = _run(capsys, "hi", "-o", out, "--model", model_dir, "--voice", "zz_nobody", "--device", "cpu")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("kokoro-speak:")]
    assert len(lines) == 1 and "unknown voice 'zz_nobody'" in lines[0]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_failure_midway_leaves_no_file(tmp_path, capsys, monkeypatch):
    class HalfwayTTS:
        default_voice = "af_heart"

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


def test_nothing_to_say(tmp_path, capsys, model_dir, voice):
    out = tmp_path / "o.wav"
    code, err = _run(capsys, "... !!! ???", "-o", out, "--model", model_dir, "--voice", voice,
                     "--device", "cpu")
    assert code == 2 and err.count("\n") == 1 and "no phonemes" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("data", "errors", "message"), [
    (b"caf\xe9 au lait", "strict", "standard input is not UTF-8 text (byte 0xe9 at offset 3)"),
    (b"caf\xe9 au lait", "surrogateescape", "byte 0xe9, which is not UTF-8, at character 3"),
])
def test_stdin_that_is_not_utf8(tmp_path, capsys, monkeypatch, model_dir, data, errors, message):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors))
    code, err = _run(capsys, "-o", tmp_path / "o.wav", "--model", model_dir)
    assert code == 2 and err.count("\n") == 1 and message in err
    assert not list(tmp_path.iterdir())


def test_list_voices_with_a_corrupt_voices_bin(tmp_path, capsys, model_dir):
    broken = tmp_path / "model"
    (broken / "voices").mkdir(parents=True)
    for path in model_dir.iterdir():
        if path.is_file():
            (broken / path.name).symlink_to(path)
    (broken / "voices" / "voices-v1.0.bin").write_bytes(b"PK\x03\x04 truncated")
    code = main(["--list-voices", "--model", str(broken)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot read voice archive" in err


@contextmanager
def _file_size_limit(limit: int):
    """Writes past ``limit`` bytes fail with EFBIG, as on a full disk (SIGXFSZ ignored)."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)
        signal.signal(signal.SIGXFSZ, previous_handler)


def test_full_disk_names_the_audio_file(tmp_path, capsys, model_dir, voice):
    out = tmp_path / "o.wav"
    argv = ["--phonemes", PHONEMES, "-o", str(out), "--model", str(model_dir), "--voice", voice,
            "--device", "cpu", "--deterministic"]
    with _file_size_limit(1000):
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and f"cannot write {out}: " in err
    assert not list(tmp_path.iterdir())  # neither the output nor its .part


def test_full_disk_names_the_timestamps_file(tmp_path, capsysbinary, model_dir, voice, reference):
    stamps = tmp_path / "t.json"
    argv = ["--phonemes", PHONEMES, "-o", "-", "--timestamps", str(stamps), "--model", str(model_dir),
            "--voice", voice, "--device", "cpu", "--deterministic"]
    with _file_size_limit(10):
        code = main(argv)
    captured = capsysbinary.readouterr()
    err = captured.err.decode()
    assert code == 1 and err.count("\n") == 1 and f"cannot write {stamps}: " in err
    assert len(captured.out) == 2 * len(reference.audio)  # the audio went out whole
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_terminated_run_leaves_no_partial_file(tmp_path, model_dir, voice, signum):
    out = tmp_path / "o.wav"
    phonemes = " ".join(["h\u0259l\u02c8O w\u02c8\u025c\u0279ld."] * 200)  # several chunks: seconds each
    proc = subprocess.Popen(
        [sys.executable, "-m", "kokoro_gpu.cli", "--phonemes", phonemes, "-o", str(out), "--model",
         str(model_dir), "--voice", voice, "--device", "cpu"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob(".o.wav.*.part")):
            assert proc.poll() is None and time.monotonic() < deadline, "synthesis never started"
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum and err == f"kokoro-speak: terminated by {name}\n"
    assert not list(tmp_path.iterdir())
