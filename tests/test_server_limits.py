"""Server limits that need a backend under the test's control: timeout, full queue, a failing model.

The app runs in-process (Starlette's TestClient runs its lifespan: scheduler,
front-end process pool) over a stand-in backend that can be held or made to
fail; the text front end is the real one.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from safetensors.numpy import save_file

from kokoro_gpu import KokoroTTS
from kokoro_gpu.backends import Backend
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.random_weights import random_voice_pack
from kokoro_gpu.scheduler import ChunkSpec
from kokoro_gpu.server.app import create_app
from kokoro_gpu.server.settings import ServerSettings
from kokoro_gpu.voices import VoiceStore


class HeldBackend(Backend):
    """Half a second of silence per chunk, once ``gate`` is open; fails on request."""

    device = "cpu"
    precision = "fp32"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.fail = False

    def forward(self, input_ids, ref_s, speed, *, deterministic, seed, trace=None):
        self.gate.wait(30)
        if self.fail:
            raise RuntimeError("simulated engine fault /secret/path")
        return np.zeros(12000, dtype=np.float32), np.full(len(input_ids), 2, dtype=np.int64)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("voices")
    save_file({"voice": random_voice_pack(1)}, str(path / "af_heart.safetensors"))
    return path


def _app(voices_dir, backend: HeldBackend, **settings):
    tts = KokoroTTS(ModelConfig.load(), backend, VoiceStore(voices_dir, None))
    return create_app(ServerSettings(g2p_workers=1, **settings), tts)


BODY = {"model": "kokoro", "input": "Hello there.", "voice": "af_heart", "response_format": "pcm"}


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_timeout_full_queue_and_engine_fault(voices_dir):
    backend = HeldBackend()
    app = _app(voices_dir, backend, request_timeout_s=1.0, max_queue=2, lookahead=2)
    with TestClient(app, raise_server_exceptions=False) as client:
        # The model never answers within the request's time: 504, in OpenAI's shape.
        error = _error(client.post("/v1/audio/speech", json=BODY), 504)
        assert error["code"] == "timeout" and "longer than 1 s" in error["message"]
        # The timed-out request's chunks were cancelled: the queue is free again.
        state = app.state.kokoro
        assert state.active_streams == 0
        # A full queue (the held model has one chunk running, two waiting): 429 with Retry-After.
        assert state.scheduler.running == 1
        held = [state.scheduler.submit(ChunkSpec(np.array([0, 1, 0]), np.zeros(256, np.float32)))
                for _ in range(2)]
        busy = client.post("/v1/audio/speech", json=BODY)
        assert _error(busy, 429)["code"] == "server_busy" and busy.headers["retry-after"] == "1"
        for future in held:
            future.cancel()
        # An engine fault: 500 with a generic message; the details stay in the server log.
        backend.fail = True
        backend.gate.set()
        response = client.post("/v1/audio/speech", json=BODY)
        error = _error(response, 500)
        assert error["type"] == "server_error" and "secret" not in response.text
        assert "Traceback" not in response.text

