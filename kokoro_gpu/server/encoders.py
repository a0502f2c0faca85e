"""Streaming audio encoders: float32 chunks in, the bytes of one continuous stream out.

``pcm`` (raw 16-bit little-endian) and ``wav`` (a header whose sizes say
"unknown", as streamed WAV is written) need no codec. ``mp3``, ``opus`` (in
Ogg) and ``flac`` use libsndfile through soundfile, already a dependency: its
wheel bundles LAME, libopus and libFLAC, and it writes to any file-like object,
so each chunk's encoded bytes can be sent as soon as the codec emits them.
MP3 is constant bit rate: libsndfile writes a LAME info frame first and fills it
in on close, and a CBR stream decodes the same with or without it. FLAC's
header then says "length unknown", as the format allows for streams. ``aac``
(ADTS) needs PyAV (FFmpeg), an optional install.
"""

from __future__ import annotations

import importlib.util
import struct
from abc import ABC, abstractmethod

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


def aac_available() -> bool:
    return importlib.util.find_spec("av") is not None


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
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
    "flac": ("FLAC", "PCM_16"),
    "wav": ("WAV", "PCM_16"),
}


class SoundFileEncoder(StreamEncoder):

    def __init__(self, fmt: str) -> None:
        import soundfile

        container, subtype = SOUNDFILE_FORMATS[fmt]
        options = {"bitrate_mode": "CONSTANT", "compression_level": 0.5} if fmt == "mp3" else {}
        self._lossless = subtype == "PCM_16"
        self._sink = _Sink()
        self._file = soundfile.SoundFile(
            self._sink, "w", samplerate=SAMPLE_RATE, channels=1, format=container, subtype=subtype, **options
        )

    def encode(self, audio: np.ndarray) -> bytes:
        # 16-bit formats get the samples pcm and wav send (libsndfile would scale floats by 32768).
        self._file.write(pcm16(audio) if self._lossless else np.asarray(audio, dtype=np.float32))
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


class AACEncoder(StreamEncoder):
    """AAC in ADTS frames through PyAV (FFmpeg's native AAC encoder)."""

    def __init__(self) -> None:
        import av

        self._av = av
        self._out = _Collector()
        self._container = av.open(self._out, "w", format="adts")
        self._stream = self._container.add_stream("aac", rate=SAMPLE_RATE, layout="mono")

    def encode(self, audio: np.ndarray) -> bytes:
        samples = np.asarray(audio, dtype=np.float32).reshape(1, -1)
        if samples.size:
            frame = self._av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
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
    """A fresh encoder for ``fmt`` (one of ``FORMATS``; aac only where ``aac_available()``)."""
    if fmt == "pcm":
        return PCMEncoder()
    if fmt == "wav":
        return WAVEncoder()
    if fmt == "aac":
        return AACEncoder()
    return SoundFileEncoder(fmt)
