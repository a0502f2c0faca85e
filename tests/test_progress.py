"""kokoro-speak's progress line: it moves before the first chunk is ready, then shows elapsed, ETA, speed."""

from __future__ import annotations

import io
import sys
import time
from types import SimpleNamespace

import pytest

from kokoro_gpu.cli import _Progress, main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_line_before_the_first_chunk_shows_the_work_and_the_clock() -> None:
    clock = FakeClock()
    bar = _Progress(total=200, stream=Terminal(), enabled=True, clock=clock)
    clock.now += 3.2
    line = bar.line()
    assert line.startswith("[" + "-" * 30 + "]   0%")
    assert "phonemising and synthesising chunk 1" in line and line.endswith("elapsed 0:03")


def test_line_after_chunks_shows_elapsed_eta_and_speed() -> None:
    clock = FakeClock()
    term = Terminal()
    bar = _Progress(total=200, stream=term, enabled=True, clock=clock)
    clock.now += 10.0
    bar.update(SimpleNamespace(text="x" * 99), 5.0)  # 100 of 200 characters (the space after it counts)
    line = bar.line()
    assert line.startswith("[" + "#" * 15 + "-" * 15 + "]  50%")
    assert "chunk 2  5.0 s of audio  elapsed 0:10  ETA 0:10  0.5x real time" in line
    # Between chunks the ETA counts down; the speed stays the one last measured.
    clock.now += 4.0
    assert bar.line().endswith("elapsed 0:14  ETA 0:06  0.5x real time")
    clock.now += 61.0
    bar.update(SimpleNamespace(text="y" * 99), 80.0)
    assert bar.line().endswith("100%  done  80.0 s of audio  elapsed 1:15  ETA 0:00  1.1x real time")
    bar.close()
    frames = term.getvalue().split("\r")[1:]
    assert len(frames) == 2 and frames[-1].endswith("\n")
    # A shorter line is padded over the longer one before it.
    assert len(frames[1].rstrip("\n")) >= len(frames[0])


def test_ticker_moves_the_line_before_any_chunk_is_done() -> None:
    term = Terminal()
    bar = _Progress(total=50, stream=term, enabled=True, interval=0.01, delay=0.0)
    bar.start()
    deadline = time.monotonic() + 5.0
    while term.getvalue().count("\r") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    out = term.getvalue()
    assert out.count("\r") >= 2 and "phonemising and synthesising chunk 1" in out
    assert out.endswith("\n") and bar._ticker is not None and not bar._ticker.is_alive()


def test_disabled_progress_writes_nothing_and_starts_no_thread() -> None:
    term = Terminal()
    bar = _Progress(total=50, stream=term, enabled=False, interval=0.01, delay=0.0)
    bar.start()
    bar.update(SimpleNamespace(text="x" * 10), 1.0)
    bar.close()
    assert term.getvalue() == "" and bar._ticker is None


@pytest.mark.parametrize("tty", [True, False])
def test_kokoro_speak_shows_progress_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path, demo_model_dir, tty: bool
) -> None:
    stderr = Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    out = tmp_path / "out.wav"
    code = main(["Hello there. How are you?", "-o", str(out), "--model", str(demo_model_dir),
                 "--device", "cpu", "--seed", "1"])
    err = stderr.getvalue()
    assert code == 0, err
    if tty:
        final = err.split("\r")[-1]
        assert "100%  done" in final and "x real time" in final and final.endswith("\n")
    else:
        assert "\r" not in err and "real time" not in err


def test_progress_counts_the_text_the_front_end_reads() -> None:
    """Normalisation spells out a phone number: the total grows with it, so 100% means done."""
    from kokoro_gpu.cli import _spoken_length

    text = "Call 555-1234."
    assert _spoken_length(text, False, "a") == len("Call five five five, one two three four.")
    assert _spoken_length(text, False, "e") == len(text)  # only English is normalised
    assert _spoken_length(text, True, "a") == len(text)  # phoneme input is read as given
