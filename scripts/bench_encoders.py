"""The server's streaming encoders on one core: x real time and bit rate per response format.

    python scripts/bench_encoders.py [--model kokoro-onnx-int8] [--voice jf_alpha] [--repeats 5]

Synthesizes one English paragraph on the CPU backend (not timed), then encodes
it as ``kokoro-serve`` streams it: pieces of ``--piece-s`` seconds through
``make_encoder(format)``, ``finish()`` included. Beside the server's MP3 and
Opus (LAME and libopus through PyAV), the same audio through libsndfile's MP3
and Ogg Opus writers (soundfile) as the server wrote them before, the
alternative PyAV was chosen over. Per row: the median over
``--repeats`` runs after one warm-up, as audio seconds encoded per second of one
core (a server encoding N streams at R x real time each needs N R / that many
cores), and the bytes per second of audio as kbit/s.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np

from kokoro_gpu.api import KokoroTTS
from kokoro_gpu.config import SAMPLE_RATE
from kokoro_gpu.server.encoders import FORMATS, make_encoder

PARAGRAPH = (
    "The town library opens at nine. On weekdays it is quiet, and the reading room fills with students "
    "who come to work before their classes. At noon the children arrive for story time, and the "
    "librarian reads to them from a big picture book."
)


def server_encoder(fmt: str, pieces: list[np.ndarray]) -> int:
    encoder = make_encoder(fmt)
    return sum(len(encoder.encode(p)) for p in pieces) + len(encoder.finish())


def libsndfile(fmt: str, pieces: list[np.ndarray]) -> int:
    import soundfile

    sink = io.BytesIO()
    container, subtype, options = {
        "mp3": ("MP3", "MPEG_LAYER_III", {"bitrate_mode": "CONSTANT", "compression_level": 0.5}),
        "opus": ("OGG", "OPUS", {}),
    }[fmt]
    with soundfile.SoundFile(sink, "w", SAMPLE_RATE, 1, subtype, format=container, **options) as f:
        for p in pieces:
            f.write(p)
    return len(sink.getvalue())


def time_encoder(encode: Callable[[], int], repeats: int) -> tuple[float, int]:
    """(median seconds, bytes) after one warm-up."""
    encode()
    times, size = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        size = encode()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="kokoro-onnx-int8", help="the model that speaks the paragraph")
    p.add_argument("--voice", default="jf_alpha")
    p.add_argument("--piece-s", type=float, default=3.0, help="seconds per encoded piece")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a Japanese voice reading English warns
        tts = KokoroTTS.from_pretrained(args.model, device="cpu")
        audio = np.asarray(tts.synthesize(PARAGRAPH, voice=args.voice, lang="a").audio, dtype=np.float32)
    seconds = len(audio) / SAMPLE_RATE
    step = max(1, int(args.piece_s * SAMPLE_RATE))
    pieces = [audio[i : i + step] for i in range(0, len(audio), step)]

    rows: list[tuple[str, str, Callable[[], int]]] = []
    for fmt in FORMATS:
        library = {"mp3": "PyAV (LAME)", "flac": "libsndfile", "opus": "PyAV (libopus)",
                   "aac": "PyAV (FFmpeg aac)"}.get(fmt, "kokoro_gpu")
        rows.append((fmt, library, lambda fmt=fmt: server_encoder(fmt, pieces)))
    for fmt in ("mp3", "opus"):
        rows.append((fmt, "libsndfile (not used)", lambda fmt=fmt: libsndfile(fmt, pieces)))

    print(f"{seconds:.1f} s of speech in pieces of {args.piece_s:g} s, one core, median of {args.repeats}\n")
    print("| format | encoder | x real time (one core) | kbit/s |")
    print("|---|---|---|---|")
    for fmt, library, encode in rows:
        median, size = time_encoder(encode, args.repeats)
        print(f"| {fmt} | {library} | {seconds / median:,.0f} | {size * 8 / seconds / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
