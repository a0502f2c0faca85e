"""Streaming audio encoders: float32 chunks in, the bytes of one continuous stream out.

``pcm`` (raw 16-bit little-endian) and ``wav`` (a header whose sizes say
"unknown", as streamed WAV is written) need no codec. ``mp3``, ``opus`` (in
Ogg) and ``aac`` (ADTS) go through PyAV (FFmpeg's LAME, libopus and AAC
encoders), which takes the codecs' speed settings: LAME at its own default
algorithm quality (5) and libopus at complexity 5 encode speech 1.1 - 1.3x
and 12 - 17x faster a core than libsndfile's MP3 and Opus writers, at the same
bit rates (``scripts/bench_encoders.py``). Each chunk's bytes leave with it: the
MP3 muxer writes frame by frame (no info frame: the output cannot seek, and a
CBR stream needs none), Ogg pages hold 100 ms. ``flac`` uses libsndfile through
soundfile, already a dependency; its header then says "length unknown", as the
format allows for streams.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import av
import numpy as np

from ..config import SAMPLE_RATE
from ..output import pcm16

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
# Formats whose encoding costs CPU enough to run off the event loop.
CODEC_FORMATS = frozenset({"mp3", "opus", "aac", "flac"})
_UNKNOWN_SIZE = 0xFFFFFFFF


class StreamEncoder(ABC):
    """Encode chunk after chunk; ``finish`` flushes the codec and returns the last bytes."""

    @abstractmethod
    def encode(self, audio: np.ndarray) -> bytes: ...

    @abstractmethod
    def finish(self) -> bytes: ...


class PCMEncoder(StreamEncoder):
    def encode(self, audio: np.ndarray) -> bytes:
        return pcm16(audio).tobytes()

    def finish(self) -> bytes:
        return b""


class WAVEncoder(PCMEncoder):
    """16-bit mono WAV; RIFF and data sizes 0xFFFFFFFF since the length is not known in advance."""

    def __init__(self) -> None:
        self._header_sent = False

    def encode(self, audio: np.ndarray) -> bytes:
        data = super().encode(audio)
        if self._header_sent:
            return data
        self._header_sent = True
        fmt = struct.pack("<HHIIHH", 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16)
        header = (b"RIFF" + struct.pack("<I", _UNKNOWN_SIZE) + b"WAVE" + b"fmt " + struct.pack("<I", 16)
                  + fmt + b"data" + struct.pack("<I", _UNKNOWN_SIZE))
        return header + data

    def finish(self) -> bytes:
        return b"" if self._header_sent else self.encode(np.zeros(0, dtype=np.float32))


class _Sink:
    """The file libsndfile writes to: it keeps every byte, hands out each new byte once.

    libsndfile seeks back on close to fill in headers; bytes already sent stay as sent.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._pos = 0
        self._sent = 0

    def write(self, data: bytes) -> int:
        end = self._pos + len(data)
        if end > len(self._data):
            self._data.extend(bytes(end - len(self._data)))
        self._data[self._pos : end] = data
        self._pos = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._data))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        return b""

    def take(self) -> bytes:
        new = bytes(self._data[self._sent :])
        self._sent = len(self._data)
        return new


# Format -> libsndfile (container, subtype).
SOUNDFILE_FORMATS = {
    "flac": ("FLAC", "PCM_16"),
    "wav": ("WAV", "PCM_16"),
}


class SoundFileEncoder(StreamEncoder):

    def __init__(self, fmt: str) -> None:
        import soundfile

        container, subtype = SOUNDFILE_FORMATS[fmt]
        self._sink = _Sink()
        self._file = soundfile.SoundFile(
            self._sink, "w", samplerate=SAMPLE_RATE, channels=1, format=container, subtype=subtype
        )

    def encode(self, audio: np.ndarray) -> bytes:
        # The samples pcm and wav send (libsndfile would scale floats by 32768).
        self._file.write(pcm16(audio))
        return self._sink.take()

    def finish(self) -> bytes:
        self._file.close()
        return self._sink.take()


class _Collector:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


@dataclass(frozen=True)
class PyAVFormat:
    """A container and codec of FFmpeg's, with the settings the server encodes with."""

    container: str
    codec: str
    bit_rate: int | None = None
    codec_options: dict[str, str] = field(default_factory=dict)
    container_options: dict[str, str] = field(default_factory=dict)


PYAV_SETTINGS = {
    # Constant 80 kbit/s, LAME's algorithm quality 5 (its command line's default; libsndfile uses 3);
    # frames only, no ID3 tag or info frame (a stream has no tags to carry or length to give).
    "mp3": PyAVFormat("mp3", "libmp3lame", 80_000, {"compression_level": "5"},
                      {"id3v2_version": "0", "write_xing": "0"}),
    # Complexity 5 of 10: under a third of the CPU of 10 on speech at this bit rate; Ogg pages of
    # 100 ms, so that a chunk's audio leaves with it (FFmpeg's default page holds back up to 1 s).
    "opus": PyAVFormat("ogg", "libopus", 32_000, {"compression_level": "5"}, {"page_duration": "100000"}),
    # FFmpeg's native AAC encoder in ADTS frames.
    "aac": PyAVFormat("adts", "aac"),
}


class PyAVEncoder(StreamEncoder):
    """``mp3``, ``opus`` or ``aac`` through PyAV (FFmpeg)."""

    def __init__(self, fmt: str) -> None:
        settings = PYAV_SETTINGS[fmt]
        self._out = _Collector()
        self._container = av.open(self._out, "w", format=settings.container,
                                  container_options=settings.container_options)
        self._stream = self._container.add_stream(settings.codec, rate=SAMPLE_RATE, layout="mono")
        if settings.bit_rate is not None:
            self._stream.bit_rate = settings.bit_rate
        self._stream.codec_context.options = settings.codec_options

    def encode(self, audio: np.ndarray) -> bytes:
        samples = np.asarray(audio, dtype=np.float32).reshape(1, -1)
        if samples.size:
            frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
            frame.sample_rate = SAMPLE_RATE
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._out.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._out.take()


def make_encoder(fmt: str) -> StreamEncoder:
    """A fresh encoder for ``fmt`` (one of ``FORMATS``)."""
    if fmt == "pcm":
        return PCMEncoder()
    if fmt == "wav":
        return WAVEncoder()
    if fmt in PYAV_SETTINGS:
        return PyAVEncoder(fmt)
    return SoundFileEncoder(fmt)
