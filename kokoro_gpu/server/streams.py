"""One speech response: admission (429 when full), the first chunk before the headers, then the rest.

The first chunk is awaited before the response starts, so a request that fails
early (nothing to speak, a full queue, a timeout) still gets its 4xx/5xx JSON;
after that the response streams, and a client that goes away cancels the
chunks not yet started. ``SpeechResponse`` always releases the stream's slot,
whether the body finished, failed, or was never iterated.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import numpy as np
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..api import KokoroTTS
from ..config import SAMPLE_RATE
from ..errors import InputError, KokoroError, QueueFullError
from ..scheduler import ChunkScheduler
from .encoders import (
    CODEC_FORMATS,
    MEDIA_TYPES,
    SOUNDFILE_FORMATS,
    StreamEncoder,
    make_encoder,
    pcm16,
)
from .errors import ApiError
from .metrics import Metrics
from .settings import ServerSettings
from .speech import SpeechJob
from .synthesis import AudioPiece, Synthesizer

logger = logging.getLogger("kokoro_gpu.server")


@dataclass
class ServerState:
    """What the routes share: the model and its voice names, the scheduler, the front end, metrics and the
    stream count."""

    settings: ServerSettings
    tts: KokoroTTS
    voices: tuple[str, ...]  # the model's, sorted: listed once at start-up, as a loaded model's stay the same
    scheduler: ChunkScheduler
    synthesizer: Synthesizer
    metrics: Metrics
    active_streams: int = 0
    draining: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)


class SpeechStream:
    """A speech job's audio with its slot, deadline and metrics."""

    def __init__(self, state: ServerState, job: SpeechJob, received: float) -> None:
        self.state = state
        self.job = job
        self.received = received
        self.deadline = received + state.settings.request_timeout_s
        self._pieces: AsyncIterator[AudioPiece] | None = None
        self._first: AudioPiece | None = None
        self._admitted = False
        self.phonemes = 0
        self.samples = 0

    async def start(self) -> None:
        """Take a slot and wait for the first chunk; raise ``ApiError`` for anything that fails first."""
        state = self.state
        if state.draining:
            raise ApiError(503, "the server is shutting down; retry on another instance",
                           code="shutting_down", retry_after=5)
        if state.active_streams >= state.settings.max_streams:
            raise ApiError(429, f"all {state.settings.max_streams} speech streams are busy; retry shortly",
                           code="server_busy", retry_after=1)
        if state.scheduler.queue_depth + state.synthesizer.lookahead > state.scheduler.max_queue:
            raise ApiError(429, "the synthesis queue is full; retry shortly", code="server_busy",
                           retry_after=1)
        state.active_streams += 1
        state.idle.clear()
        state.metrics.active_streams.set(state.active_streams)
        self._admitted = True
        self._pieces = state.synthesizer.audio(self.job)
        try:
            self._first = await self._next()
        except BaseException:
            await self.close()
            raise
        state.metrics.time_to_first_audio.observe(time.perf_counter() - self.received)

    async def _next(self) -> AudioPiece | None:
        assert self._pieces is not None
        remaining = self.deadline - time.perf_counter()
        try:
            if remaining <= 0:
                raise TimeoutError
            piece = await asyncio.wait_for(anext(self._pieces, None), remaining)
        except TimeoutError:
            raise ApiError(504, f"the request took longer than {self.state.settings.request_timeout_s:g} s; "
                           "send shorter input", code="timeout") from None
        except QueueFullError as e:
            raise ApiError(429, str(e), code="server_busy", retry_after=1) from None
        except (InputError, KokoroError) as e:
            raise ApiError(400, str(e), param="input", code="invalid_input") from None
        except Exception:
            logger.exception("kokoro_gpu: synthesis failed")
            raise ApiError(500, "synthesis failed; the server log has the details",
                           code="internal_error") from None
        if piece is not None:
            self.phonemes += piece.phonemes
            self.samples += len(piece.audio)
            self.state.metrics.audio_seconds.inc(len(piece.audio) / SAMPLE_RATE)
        return piece

    async def pieces(self) -> AsyncIterator[AudioPiece]:
        piece, self._first = self._first, None
        while piece is not None:
            yield piece
            piece = await self._next()

    async def close(self) -> None:
        if self._pieces is not None:
            pieces, self._pieces = self._pieces, None
            await pieces.aclose()  # type: ignore[attr-defined]
        if self._admitted:
            self._admitted = False
            state = self.state
            state.active_streams -= 1
            state.metrics.active_streams.set(state.active_streams)
            if state.active_streams == 0:
                state.idle.set()


class SpeechResponse(StreamingResponse):
    """A stream that notices a client leaving while it waits for audio, and always closes its stream."""

    def __init__(self, content: AsyncIterator[bytes], stream: SpeechStream, media_type: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def run(func: Callable[[], Awaitable[None]]) -> None:
                    await func()
                    group.cancel_scope.cancel()

                group.start_soon(run, lambda: self.stream_response(send))
                await run(lambda: self._until_disconnect(receive))
        except Exception as error:  # the headers are sent: the client sees the stream cut short
            _log_stream_failure(error)
        finally:
            with anyio.CancelScope(shield=True):
                await self._stream.close()

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


def _log_stream_failure(error: BaseException) -> None:
    for e in getattr(error, "exceptions", (error,)):  # a task group's errors come grouped
        if isinstance(e, OSError):
            logger.info("kokoro_gpu: client went away mid-stream")
        elif isinstance(e, ApiError):
            logger.warning("kokoro_gpu: a speech stream ended early: %s", e.message)
        else:
            logger.error("kokoro_gpu: a speech stream failed after its first bytes", exc_info=e)


async def _encoded(stream: SpeechStream, encoder: StreamEncoder) -> AsyncIterator[tuple[bytes, AudioPiece]]:
    """Each piece's encoded bytes (codecs in a thread), then the encoder's last bytes."""
    off_loop = stream.job.response_format in CODEC_FORMATS
    async for piece in stream.pieces():
        audio = piece.audio
        data = await asyncio.to_thread(encoder.encode, audio) if off_loop else encoder.encode(audio)
        yield data, piece
    tail = await asyncio.to_thread(encoder.finish) if off_loop else encoder.finish()
    yield tail, AudioPiece(np.zeros(0, dtype=np.float32))


async def audio_body(stream: SpeechStream) -> AsyncIterator[bytes]:
    async for data, _ in _encoded(stream, make_encoder(stream.job.response_format)):
        if data:
            yield data


def _sse(event: dict) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


async def sse_body(stream: SpeechStream) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` (base64 audio) ..., then ``speech.audio.done``."""
    async for data, _ in _encoded(stream, make_encoder(stream.job.response_format)):
        if data:
            yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
    yield _sse({"type": "speech.audio.done", "usage": usage(stream)})


def usage(stream: SpeechStream) -> dict[str, int]:
    """Input tokens are phonemes; output tokens are 25 ms audio frames."""
    frames = stream.samples // 600
    tokens = stream.phonemes
    return {"input_tokens": tokens, "output_tokens": frames, "total_tokens": tokens + frames}


def _words(piece: AudioPiece) -> list[dict]:
    return [{"word": w.word, "start_time": w.start, "end_time": w.end} for w in piece.words]


async def captioned_body(stream: SpeechStream) -> AsyncIterator[bytes]:
    """One JSON line per piece: its encoded audio (base64), the format, and the words it completes."""
    fmt = stream.job.response_format
    async for data, piece in _encoded(stream, make_encoder(fmt)):
        if data or piece.words:
            line = {"audio": base64.b64encode(data).decode(), "audio_format": fmt,
                    "timestamps": _words(piece)}
            yield (json.dumps(line, separators=(",", ":")) + "\n").encode()


async def whole(stream: SpeechStream) -> tuple[bytes, list[dict]]:
    """The complete file (headers with real sizes) and every word, for ``stream: false``."""
    parts, words = [], []
    try:
        async for piece in stream.pieces():
            parts.append(piece.audio)
            words.extend(_words(piece))
    finally:
        await stream.close()
    audio = np.concatenate(parts)
    return await asyncio.to_thread(encode_file, audio, stream.job.response_format), words


def encode_file(audio: np.ndarray, fmt: str) -> bytes:
    if fmt not in SOUNDFILE_FORMATS:  # pcm, and the codecs (streams: their headers need no sizes)
        encoder = make_encoder(fmt)
        return encoder.encode(audio) + encoder.finish()
    import soundfile

    container, subtype = SOUNDFILE_FORMATS[fmt]
    buffer = io.BytesIO()
    soundfile.write(buffer, pcm16(audio), SAMPLE_RATE, format=container, subtype=subtype)
    return buffer.getvalue()


def media_type(fmt: str) -> str:
    return MEDIA_TYPES[fmt]
