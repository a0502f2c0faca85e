"""The ASGI app (FastAPI on uvicorn) and the ``kokoro-serve`` entry point.

FastAPI/Starlette and uvicorn: the most used, best maintained async Python web
stack; streaming responses, lifespan start-up and shutdown and exception
handlers are built in, and uvicorn drains in-flight responses on SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..api import KokoroTTS
from ..errors import KokoroError
from ..ops.parallel import worker_count
from ..scheduler import ChunkScheduler
from ..text.chunking import MAX_PHONEMES
from .errors import install_handlers
from .metrics import Metrics, RequestCounter
from .routes import router
from .settings import ServerSettings, settings_from_args
from .streams import ServerState
from .synthesis import Synthesizer, phonemize_piece, warm_front_end

logger = logging.getLogger("kokoro_gpu.server")


def load_model(settings: ServerSettings) -> KokoroTTS:
    return KokoroTTS.from_pretrained(settings.model, device=settings.device, precision=settings.precision,
                                     local_files_only=settings.local_files_only)


def create_app(settings: ServerSettings, tts: KokoroTTS | None = None) -> FastAPI:
    """The server's app; the model (``tts``, else loaded from ``settings``) is set up at start-up."""
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        model = tts if tts is not None else await asyncio.to_thread(load_model, settings)
        scheduler = ChunkScheduler(model.backend, max_batch=settings.max_batch, max_queue=settings.max_queue,
                                   gather_s=settings.gather_ms / 1000, on_batch=metrics.observe_batch,
                                   lanes=settings.lanes, on_wait=metrics.chunk_wait_seconds.observe)
        metrics.count_phase_runs(model.backend.phase_runs)
        workers = settings.g2p_workers or worker_count()
        # Spawned, not forked: the parent runs threads (scheduler, encoders) that a fork would copy mid-state.
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=warm_front_end, initargs=(settings.warm_langs,))
        try:
            # Start every worker now, so that no request pays for loading the G2P models.
            warm = [pool.submit(phonemize_piece, "Ready.", settings.warm_langs[0], MAX_PHONEMES)
                    for _ in range(workers)]
            await asyncio.gather(*(asyncio.wrap_future(f) for f in warm))
            synthesizer = Synthesizer(model, scheduler, pool, lookahead=settings.lookahead,
                                      deterministic=settings.deterministic,
                                      on_g2p=metrics.g2p_seconds.observe,
                                      on_first_chunk=metrics.first_chunk_seconds.observe)
            voices = tuple(await asyncio.to_thread(model.list_voices))
            state = ServerState(settings, model, voices, scheduler, synthesizer, metrics)
            state.idle.set()
            app.state.kokoro = state
            logger.info("kokoro_gpu: serving on %s (%s), %d lanes of up to %d chunks, %d front-end workers",
                        model.device, model.precision, scheduler.lanes, scheduler.max_batch, workers)
            yield
            # uvicorn has let in-flight streams finish (up to its graceful timeout) before this runs.
            state.draining = True
            try:
                await asyncio.wait_for(state.idle.wait(), settings.graceful_timeout_s)
            except TimeoutError:
                logger.warning("kokoro_gpu: %d streams still open at shutdown", state.active_streams)
        finally:
            scheduler.close(cancel_pending=True)
            pool.shutdown(wait=True, cancel_futures=True)

    app = FastAPI(title="kokoro_gpu", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    install_handlers(app)
    app.include_router(router)
    app.add_middleware(RequestCounter, metrics=metrics)
    return app


def main(argv: list[str] | None = None) -> int:
    """``kokoro-serve``: load the model (exit 2 with one line if that fails), then serve until stopped."""
    import uvicorn

    settings = settings_from_args(argv)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        tts = load_model(settings)
    except KokoroError as e:
        print(f"kokoro-serve: error: {e}", file=sys.stderr)
        return 2
    app = create_app(settings, tts)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                timeout_graceful_shutdown=int(settings.graceful_timeout_s) or None)
    return 0
