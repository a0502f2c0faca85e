"""The HTTP routes: OpenAI's speech endpoint, its captioned variant, voices, models, health, metrics, page."""

from __future__ import annotations

import base64
import hmac
import logging
import time
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .. import __version__
from .errors import ApiError
from .page import PAGE
from .speech import MODELS, parse_speech, read_json, unknown_fields
from .streams import (
    ServerState,
    SpeechResponse,
    SpeechStream,
    audio_body,
    captioned_body,
    media_type,
    sse_body,
    usage,
    whole,
)

logger = logging.getLogger("kokoro_gpu.server")
router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.kokoro


def authorize(request: Request) -> None:
    """With an API key set, require ``Authorization: Bearer KEY`` (compared in constant time)."""
    key = _state(request).settings.api_key
    if not key:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
        raise ApiError(401, "missing or wrong API key; send 'Authorization: Bearer YOUR_KEY'",
                       code="invalid_api_key")


async def _open(request: Request, *, timestamps: bool = False) -> tuple[SpeechStream, dict[str, Any]]:
    received = time.perf_counter()
    authorize(request)
    state = _state(request)
    data = await read_json(request, state.settings.max_body_bytes)
    job = replace(parse_speech(data, state.tts, state.voices, state.settings), timestamps=timestamps)
    ignored = unknown_fields(data)
    if ignored:
        logger.debug("kokoro_gpu: ignoring request fields %s", ignored)
    stream = SpeechStream(state, job, received)
    await stream.start()
    return stream, data


@router.post("/v1/audio/speech")
async def speech(request: Request) -> Response:
    """OpenAI's speech endpoint: audio bytes (``stream_format: audio``) or SSE events (``sse``)."""
    stream, _ = await _open(request)
    fmt = stream.job.response_format
    if stream.job.stream_format == "sse":
        return SpeechResponse(sse_body(stream), stream, "text/event-stream",
                              headers={"Cache-Control": "no-cache"})
    if not stream.job.stream:
        audio, _ = await whole(stream)
        return Response(audio, media_type=media_type(fmt))
    return SpeechResponse(audio_body(stream), stream, media_type(fmt),
                          headers={"Content-Disposition": f"inline; filename=speech.{fmt}"})


@router.post("/v1/audio/speech/captioned")
@router.post("/dev/captioned_speech")
async def captioned_speech(request: Request) -> Response:
    """Audio with word timestamps: JSON lines ``{audio, audio_format, timestamps}`` as chunks finish,
    or (``stream: false``) one JSON object with the whole file and every word."""
    stream, _ = await _open(request, timestamps=True)
    if not stream.job.stream:
        audio, words = await whole(stream)
        return JSONResponse({"audio": base64.b64encode(audio).decode(),
                             "audio_format": stream.job.response_format, "timestamps": words,
                             "usage": usage(stream)})
    return SpeechResponse(captioned_body(stream), stream, "application/x-ndjson")


@router.get("/v1/audio/voices")
async def voices(request: Request) -> list[dict[str, str]]:
    authorize(request)
    return [{"id": name, "name": name} for name in _state(request).voices]


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    authorize(request)
    return {"object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "kokoro_gpu"} for m in MODELS]}


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    state = _state(request)
    body = {"status": "draining" if state.draining else "ok", "version": __version__,
            "device": state.tts.device, "precision": state.tts.precision,
            "active_streams": state.active_streams, "queue_depth": state.scheduler.queue_depth,
            "max_batch": state.scheduler.max_batch}
    return JSONResponse(body, status_code=503 if state.draining else 200)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = _state(request)
    state.metrics.queue_depth.set(state.scheduler.queue_depth)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", response_class=HTMLResponse)
async def page() -> HTMLResponse:
    return HTMLResponse(PAGE)
