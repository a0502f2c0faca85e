"""kokoro-serve end to end: a real server process on 127.0.0.1, the real ``openai`` client, CPU backend.

The model is a random-weights directory; every synthesis is a short sentence
because the CPU backend takes about a second each. Audio is compared with
``KokoroTTS.synthesize`` of the same text, voice and seed in this process.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from server_helpers import API_KEY, band_similarity, cpu_server, decode, pcm16

from kokoro_gpu import KokoroTTS

pytest.importorskip("fastapi")

TEXT = "Hi."
SEED = 11
MAX_INPUT_CHARS = 300
MAX_BODY_BYTES = 4096
MAX_STREAMS = 4
# Seventy lines: seventy chunks, a minute or more of CPU synthesis.
LONG_TEXT = "\n".join(["Go."] * 70)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from kokoro_gpu.random_weights import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("model"), seed=0)


@pytest.fixture(scope="module")
def tts(model_dir) -> KokoroTTS:
    return KokoroTTS.from_pretrained(model_dir, device="cpu")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    process = cpu_server(
        model_dir, "--api-key", API_KEY, "--max-streams", str(MAX_STREAMS),
        "--max-input-chars", str(MAX_INPUT_CHARS), "--max-body-bytes", str(MAX_BODY_BYTES),
        log=tmp_path_factory.mktemp("log") / "server.log",
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def reference(tts) -> np.ndarray:
    """What the server must send for TEXT with voice af_heart (OpenAI's 'alloy' maps to it here)."""
    return tts.synthesize(TEXT, voice="af_heart", seed=SEED).audio


def _speak(client: openai.OpenAI, path: Path, **kwargs) -> bytes:
    args = {"model": "tts-1", "voice": "alloy", "input": TEXT, "extra_body": {"seed": SEED}} | kwargs
    with client.audio.speech.with_streaming_response.create(**args) as response:
        assert response.status_code == 200
        response.stream_to_file(path)
    return path.read_bytes()


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac"])
def test_lossless_formats_equal_synthesize(client, reference, tmp_path, fmt):
    audio = decode(_speak(client, tmp_path / f"out.{fmt}", response_format=fmt), fmt)
    np.testing.assert_array_equal(pcm16(audio), pcm16(reference))


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac"])
def test_lossy_formats_sound_like_synthesize(client, reference, tmp_path, fmt):
    audio = decode(_speak(client, tmp_path / f"out.{fmt}", response_format=fmt), fmt)
    assert abs(len(audio) - len(reference)) < 0.1 * 24000, "the decoded length is off by over 100 ms"
    similarity = band_similarity(audio, reference)
    noise = np.random.default_rng(0).standard_normal(len(reference)).astype(np.float32) * 0.1
    reversed_speech = reference[::-1].copy()
    others = [band_similarity(noise, reference), band_similarity(reversed_speech, reference)]
    assert similarity > 0.75 and similarity > max(others) + 0.3, (similarity, others)


def test_whole_file_when_not_streamed(server, reference):
    """``stream: false``: a complete file whose header has the real length (soundfile reads it).

    No voice given: the model's default voice, af_heart."""
    import io

    import soundfile

    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=300,
                          headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "kokoro", "input": TEXT, "seed": SEED, "response_format": "flac",
                                "stream": False})
    assert response.status_code == 200
    audio, rate = soundfile.read(io.BytesIO(response.content), dtype="int16")
    assert rate == 24000
    np.testing.assert_array_equal(audio, pcm16(reference))


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_whole_codec_file_when_not_streamed(server, reference, fmt):
    """``stream: false`` with a codec: one complete file that libsndfile decodes to the audio."""
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=300,
                          headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": "kokoro", "input": TEXT, "seed": SEED, "response_format": fmt,
                                "stream": False})
    assert response.status_code == 200
    audio = decode(response.content, fmt)
    assert abs(len(audio) - len(reference)) < 0.1 * 24000
    assert band_similarity(audio, reference) > 0.75


def test_sse_events(server, reference):
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=300,
                      headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"model": "gpt-4o-mini-tts", "input": TEXT, "voice": "af_heart", "seed": SEED,
                            "response_format": "pcm", "stream_format": "sse",
                            "instructions": "Speak cheerfully."}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(json.loads(line[len("data: "):]))
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["input_tokens"] > 0
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    np.testing.assert_array_equal(np.frombuffer(pcm, dtype="<i2"), pcm16(reference))


def test_captioned_stream_two_sentences(server, tts):
    """Two sentences: two chunks, their joins faded over 5 ms; words with times, in order."""
    text = "Hi there. Bye now."
    lines = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech/captioned", timeout=300,
                      headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"model": "kokoro", "input": text, "voice": "af_bella", "seed": SEED,
                            "response_format": "pcm", "lang": "en-us"}) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    pcm = np.frombuffer(b"".join(base64.b64decode(x["audio"]) for x in lines), dtype="<i2")
    words = [w for x in lines for w in x["timestamps"]]
    assert [w["word"] for w in words] == ["Hi", "there", "Bye", "now"]
    assert all(a["end_time"] <= b["start_time"] for a, b in itertools.pairwise(words))
    first = tts.synthesize("Hi there.", voice="af_bella", seed=SEED)
    second = tts.synthesize("Bye now.", voice="af_bella", seed=SEED + 1)
    fade = 0.5 - 0.5 * np.cos(np.pi * (np.arange(120) + 0.5) / 120)
    want = np.concatenate([first.audio[:-120], first.audio[-120:] * fade[::-1],
                           second.audio[:120] * fade, second.audio[120:]])
    assert np.abs(pcm.astype(np.int32) - pcm16(want)).max() <= 1
    assert words[2]["start_time"] == pytest.approx(first.seconds + second.words[0].start, abs=1e-3)


def test_concurrent_clients_get_their_own_audio(server, client, tts, tmp_path):
    cases = [("af_heart", 1), ("am_adam", 2), ("bf_emma", 3), ("af_bella(2)+am_adam(1)", 4)]

    def fetch(case: tuple[str, int]) -> np.ndarray:
        voice, seed = case
        data = _speak(client, tmp_path / f"{seed}.pcm", voice=voice, response_format="pcm",
                      extra_body={"seed": seed})
        return decode(data, "pcm")

    with ThreadPoolExecutor(len(cases)) as pool:
        got = list(pool.map(fetch, cases))
    for (voice, seed), audio in zip(cases, got, strict=True):
        want = tts.synthesize(TEXT, voice=voice, seed=seed).audio
        np.testing.assert_array_equal(pcm16(audio), pcm16(want), err_msg=voice)


def _batches(server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    counts = [line for line in text.splitlines() if line.startswith("kokoro_batch_size_count")]
    return float(counts[0].split()[-1])


def _wait_idle(server, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        health = server.health()
        if health["active_streams"] == 0 and health["queue_depth"] == 0:
            return health
        time.sleep(0.2)
    raise AssertionError(f"server not idle after {timeout} s: {server.health()}")


def test_full_server_answers_429_and_disconnects_free_the_slots(server):
    _wait_idle(server)
    http = httpx.Client(timeout=300, headers={"Authorization": f"Bearer {API_KEY}"})
    body = {"model": "kokoro", "input": LONG_TEXT, "voice": "af_heart", "response_format": "pcm"}
    streams = []  # (response, its byte iterator): both kept, as dropping the iterator closes the stream
    try:
        for _ in range(MAX_STREAMS):
            response = http.send(http.build_request("POST", f"{server.url}/v1/audio/speech", json=body),
                                 stream=True)
            assert response.status_code == 200
            chunks = response.iter_bytes()
            next(chunks)
            streams.append((response, chunks))
        busy = http.post(f"{server.url}/v1/audio/speech", json=body)
        assert busy.status_code == 429
        assert int(busy.headers["retry-after"]) >= 1
        assert busy.json()["error"]["code"] == "server_busy"
        assert server.health()["active_streams"] == MAX_STREAMS
    finally:
        at_close = _batches(server)
        for response, _ in streams:
            response.close()
        http.close()
    _wait_idle(server)
    # Of the 4 x 70 chunks, at most the one on the model per stream is made after the clients left.
    assert _batches(server) - at_close <= MAX_STREAMS
    ok = httpx.post(f"{server.url}/v1/audio/speech", timeout=300,
                    headers={"Authorization": f"Bearer {API_KEY}"},
                    json={"model": "kokoro", "input": TEXT, "voice": "af_heart", "response_format": "pcm"})
    assert ok.status_code == 200 and len(ok.content) > 0


def test_a_short_request_is_not_queued_behind_a_long_one(server, client, reference, tmp_path):
    """While a 70-chunk stream runs, a one-chunk request gets its audio and the long stream is still going."""
    _wait_idle(server)
    with httpx.Client(timeout=300, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        body = {"model": "kokoro", "input": LONG_TEXT, "voice": "am_adam", "response_format": "pcm"}
        with http.stream("POST", f"{server.url}/v1/audio/speech", json=body) as long_stream:
            chunks = long_stream.iter_bytes()
            next(chunks)
            short = decode(_speak(client, tmp_path / "short.pcm", response_format="pcm"), "pcm")
            np.testing.assert_array_equal(pcm16(short), pcm16(reference))
            assert server.health()["active_streams"] == 1, "the long stream ended before the short one"
    _wait_idle(server)


BAD_REQUESTS = [
    ("bad json", b"{not json", 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("no model", {"input": TEXT, "voice": "af_heart"}, 400, "model"),
    ("unknown model", {"model": "whisper-1", "input": TEXT, "voice": "af_heart"}, 400, "model"),
    ("unknown voice", {"model": "kokoro", "input": TEXT, "voice": "zz_nobody"}, 400, "voice"),
    ("path as voice", {"model": "kokoro", "input": TEXT, "voice": "../voices/af_heart.safetensors"}, 400,
     "voice"),
    ("absolute path", {"model": "kokoro", "input": TEXT, "voice": "/etc/passwd"}, 400, "voice"),
    ("unmapped openai voice", {"model": "kokoro", "input": TEXT, "voice": "verse"}, 400, "voice"),
    ("bad mix weight", {"model": "kokoro", "input": TEXT, "voice": "af_heart(0)"}, 400, "voice"),
    ("bad format", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "response_format": "ogg"}, 400,
     "response_format"),
    ("bad stream format", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "stream_format": "ws"}, 400,
     "stream_format"),
    ("speed 0", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "speed": 0}, 400, "speed"),
    ("speed 5", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "speed": 5}, 400, "speed"),
    ("speed text", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "speed": "fast"}, 400, "speed"),
    ("empty input", {"model": "kokoro", "input": "  ", "voice": "af_heart"}, 400, "input"),
    ("oversized input", {"model": "kokoro", "input": "a" * (MAX_INPUT_CHARS + 1), "voice": "af_heart"}, 400,
     "input"),
    ("input not text", {"model": "kokoro", "input": 42, "voice": "af_heart"}, 400, "input"),
    ("bad lang", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "lang": "xx"}, 400, "lang"),
    ("oversized body", {"model": "kokoro", "input": TEXT, "voice": "af_heart", "pad": "x" * MAX_BODY_BYTES},
     413, None),
]


def _assert_openai_error(response: httpx.Response, status: int, param: str | None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["message"] and "\n" not in error["message"] and "Traceback" not in error["message"]
    assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize("name,body,status,param", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_requests_get_openai_errors(server, name, body, status, param):
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(f"{server.url}/v1/audio/speech", content=content, headers=headers, timeout=60)
    _assert_openai_error(response, status, param)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}])
def test_wrong_key_is_401(server, headers):
    response = httpx.post(f"{server.url}/v1/audio/speech", headers=headers, timeout=60,
                          json={"model": "kokoro", "input": TEXT, "voice": "af_heart"})
    assert _assert_openai_error(response, 401, None)["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/v1/audio/voices", headers=headers).status_code == 401


def test_openai_client_raises_with_the_message(client, tmp_path):
    with pytest.raises(openai.BadRequestError, match="unknown voice 'zz_nobody'"):
        _speak(client, tmp_path / "x.mp3", voice="zz_nobody")


def test_routes_and_other_errors(server):
    auth = {"Authorization": f"Bearer {API_KEY}"}
    voices = httpx.get(f"{server.url}/v1/audio/voices", headers=auth).json()
    assert voices == [{"id": v, "name": v} for v in ["af_bella", "af_heart", "am_adam", "bf_emma"]]
    models = httpx.get(f"{server.url}/v1/models", headers=auth).json()
    assert {m["id"] for m in models["data"]} == {"kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"}
    assert server.health()["status"] == "ok" and server.health()["device"] == "cpu"
    metrics = httpx.get(f"{server.url}/metrics").text
    for name in ("kokoro_requests_total", "kokoro_queue_depth", "kokoro_batch_size_bucket",
                 "kokoro_time_to_first_audio_seconds_bucket", "kokoro_audio_seconds_total"):
        assert name in metrics
    assert 'route="/v1/audio/speech",status="400"' in metrics
    _assert_openai_error(httpx.get(f"{server.url}/no/such/route"), 404, None)
    _assert_openai_error(httpx.get(f"{server.url}/v1/audio/speech", headers=auth), 405, None)
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 200 and "<textarea" in page.text


def test_a_pinned_server_runs_with_its_front_end_on_the_given_processors(model_dir, tmp_path):
    """ServerProcess(cpus=...) (load_test --client-cpus): the server and its front-end process may run
    only on those processors, and it serves; load_test's split leaves the server all but the clients'."""
    from script_modules import load_script

    mine = sorted(os.sched_getaffinity(0))
    process = cpu_server(model_dir, log=tmp_path / "server.log", cpus={mine[0]})
    try:
        process.wait_ready()
        pids = process.pids()
        assert len(pids) >= 2, "the server and its front-end process"
        assert all(os.sched_getaffinity(pid) == {mine[0]} for pid in pids)
        body = {"model": "kokoro", "input": "Hi.", "voice": "am_adam", "response_format": "pcm"}
        response = httpx.post(f"{process.url}/v1/audio/speech", timeout=300, json=body)
        assert response.status_code == 200 and len(response.content) > 0
    finally:
        process.stop()
    assert os.sched_getaffinity(0) == set(mine), "this process keeps its own processors"
    load_test = load_script("load_test")
    assert load_test.split_cpus(0) == (None, None)
    if len(mine) > 1:
        assert load_test.split_cpus(1) == (set(mine[:-1]), {mine[-1]})
    with pytest.raises(SystemExit, match="at least one"):
        load_test.split_cpus(len(mine))


def test_graceful_shutdown_finishes_the_stream(model_dir, tts, tmp_path):
    """SIGTERM while a stream runs: the stream still gets all of its audio, then the server exits."""
    process = cpu_server(model_dir, log=tmp_path / "server.log")
    try:
        process.wait_ready()
        got = bytearray()
        with httpx.stream("POST", f"{process.url}/v1/audio/speech", timeout=300,
                          json={"model": "kokoro", "input": "One.\nTwo.\nThree.", "voice": "am_adam",
                                "seed": 5, "response_format": "pcm"}) as response:
            chunks = response.iter_bytes()
            got.extend(next(chunks))
            stopper = threading.Thread(target=process.stop)
            stopper.start()
            for chunk in chunks:
                got.extend(chunk)
        stopper.join()
        # uvicorn exits by re-raising the SIGTERM it caught, once the streams are done.
        assert process.process.returncode in (0, -15), process.log.read_text()[-2000:]
        assert "Traceback" not in process.log.read_text()
    finally:
        process.stop()
    lines = ["One.", "Two.", "Three."]
    want = [tts.synthesize(t, voice="am_adam", seed=5 + i).audio for i, t in enumerate(lines)]
    assert len(got) // 2 == sum(len(w) for w in want)


CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def test_page_plays_streamed_audio_in_chromium(server, reference):
    """The page in headless chromium: type text, pick a voice, press Speak; all the audio is played."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("chromium is absent (apt-get install chromium chromium-driver)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(str(CHROMEDRIVER)))
    try:
        browser.get(f"{server.url}/")
        browser.find_element(By.ID, "key").send_keys(API_KEY)
        browser.execute_script("loadVoices()")  # again, now with the key
        WebDriverWait(browser, 30).until(lambda b: len(Select(b.find_element(By.ID, "voice")).options) >= 4)
        Select(browser.find_element(By.ID, "voice")).select_by_value("af_heart")
        text = browser.find_element(By.ID, "text")
        text.clear()
        text.send_keys(TEXT)
        browser.find_element(By.ID, "speak").click()
        WebDriverWait(browser, 300).until(
            lambda b: b.execute_script("return kokoroPlayback.done || kokoroPlayback.error !== null"))
        playback = browser.execute_script("return kokoroPlayback")
        assert playback["error"] is None, playback["error"]
        assert playback["samples"] == len(reference)
        # The audio clock runs: what was scheduled is being played.
        start = browser.execute_script("return context.currentTime")
        time.sleep(0.3)
        assert browser.execute_script("return context.state") == "running"
        assert browser.execute_script("return context.currentTime") > start
        assert "Done" in browser.find_element(By.ID, "status").text
    finally:
        browser.quit()


def test_text_pieces_put_the_first_sentence_alone():
    from kokoro_gpu.server.synthesis import text_pieces

    assert text_pieces("Hi there. How are you? Fine.\nNext line.") == [
        "Hi there.", "How are you? Fine.", "Next line."]
    assert text_pieces("One sentence only.") == ["One sentence only."]
    assert text_pieces('"Quoted!" she said.') == ['"Quoted!"', "she said."]
    assert text_pieces("  \n ") == []


def test_voice_names_mixes_and_openai_names():
    from kokoro_gpu.server.errors import ApiError
    from kokoro_gpu.server.speech import mix_spec, resolve_voice

    have = ("af_bella", "af_heart", "am_adam")
    assert resolve_voice("af_heart", have) == [("af_heart", 1.0)]
    assert resolve_voice("af_bella(2)+am_adam(1)", have) == [("af_bella", 2.0), ("am_adam", 1.0)]
    assert resolve_voice(" af_bella ( 0.5 ), af_heart", have) == [("af_bella", 0.5), ("af_heart", 1.0)]
    assert resolve_voice("alloy", have) == [("af_heart", 1.0)]  # af_alloy absent: the next choice
    assert resolve_voice("nova+onyx", have) == [("af_bella", 1.0), ("am_adam", 1.0)]
    assert mix_spec(resolve_voice("af_bella(2)+am_adam", have)) == "af_bella(2)+am_adam(1)"
    bad = {"verse": "maps to am_puck or am_liam", "af_sky": "unknown voice 'af_sky'",
           "../af_heart": "unknown voice '../af_heart'", "af_heart.pt": "unknown voice 'af_heart.pt'",
           "C:\\x": "unknown voice", "af_heart(-1)": "bad weight '-1'", "af_heart(": "malformed voice mix",
           "": "'voice' is empty", "a" * 300: "longer than 200", "+".join(["a"] * 65): "65 terms"}
    for spec, message in bad.items():
        with pytest.raises(ApiError) as error:
            resolve_voice(spec, have)
        assert error.value.status == 400 and error.value.param == "voice"
        assert message in error.value.message and "\n" not in error.value.message


def test_voices_are_read_from_the_list_never_the_working_directory(model_dir, tmp_path, monkeypatch):
    """A file in the server's working directory named like a resolved voice is not read: voices come from
    the model by name."""
    from kokoro_gpu.server.settings import ServerSettings
    from kokoro_gpu.server.speech import parse_speech

    tts = KokoroTTS.from_pretrained(model_dir, device="cpu")
    monkeypatch.chdir(tmp_path)
    for name in ("af_heart(1)", "af_heart"):
        (tmp_path / name).write_bytes(b"not a voice")
    job = parse_speech({"model": "kokoro", "input": TEXT, "voice": "af_heart"}, tts, tuple(tts.list_voices()),
                       ServerSettings())
    assert job.voice == "af_heart(1)"
    np.testing.assert_array_equal(job.pack, tts.voices.load(model_dir / "voices" / "af_heart.safetensors"))


def test_serve_without_pyav_is_a_one_line_error(monkeypatch, capsys):
    """kokoro-serve in an environment without PyAV (the serve extra's encoders) exits 2 naming the extra."""
    import sys

    from kokoro_gpu.server import main

    for name in [m for m in sys.modules if m.startswith("kokoro_gpu.server.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "av", None)  # import av: ModuleNotFoundError
    assert main(["--model", "nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "kokoro-serve: error: the server needs av; install it with: pip install 'kokoro-gpu[serve]'"


@pytest.mark.parametrize("fmt", ["opus", "mp3"])
def test_codecs_send_each_chunk_with_it(fmt):
    """A chunk's audio leaves with it: of a first chunk of half a second, all but a codec frame and Ogg's
    page (100 ms) decodes before the second chunk is encoded, and the whole stream decodes (with
    libsndfile, not the encoder's FFmpeg) to the audio's length."""
    import soundfile

    from kokoro_gpu.server.encoders import make_encoder

    t = np.arange(24000 * 2) / 24000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    encoder = make_encoder(fmt)
    first = encoder.encode(audio[:12000])
    rest = encoder.encode(audio[12000:]) + encoder.finish()
    head, rate = soundfile.read(io.BytesIO(first), dtype="float32")
    assert rate == 24000 and len(head) >= 12000 - 2400 - 312, len(head)  # 100 ms and a codec's lookahead
    whole, _ = soundfile.read(io.BytesIO(first + rest), dtype="float32")
    assert abs(len(whole) - len(audio)) < 2400, len(whole)  # LAME's delay and padding: ~1,500 samples
    assert band_similarity(whole, audio) > 0.9


def test_encoder_benchmark_script(model_dir, capsys):
    """scripts/bench_encoders.py: a row per response format and libsndfile's MP3 and Opus beside them,
    each with a positive speed and the bit rate of what the encoder wrote."""
    from script_modules import load_script

    bench_encoders = load_script("bench_encoders")
    assert bench_encoders.main(["--model", str(model_dir), "--voice", "af_heart", "--repeats", "1"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    table = {(r[0].strip(), r[1].strip()): (float(r[2].replace(",", "")), float(r[3])) for r in rows[1:]}
    assert {fmt for fmt, _ in table} == {"mp3", "opus", "aac", "flac", "wav", "pcm"}
    assert {("mp3", "libsndfile (not used)"), ("opus", "libsndfile (not used)")} <= set(table)
    assert all(speed > 0 for speed, _ in table.values())
    assert table[("mp3", "PyAV (LAME)")][1] == pytest.approx(80, rel=0.05)  # constant 80 kbit/s
    assert table[("pcm", "kokoro_gpu")][1] == pytest.approx(384.0, rel=1e-3)  # 16-bit mono at 24 kHz
    assert table[("opus", "PyAV (libopus)")][1] < 64  # about its 32 kbit/s


def test_load_test_script_against_the_server(server):
    """scripts/load_test.py's clients (closed loop, 2 streams, pcm) and its table row, on this server."""
    from script_modules import load_script

    load_test = load_script("load_test")
    before = load_test.server_metrics(server.url)
    records, wall = load_test.run_level(server.url, API_KEY, "pcm", 2, 2.0, None, 1, ["Hi."],
                                        {"voice": "af_heart"})
    after = load_test.server_metrics(server.url)
    assert records and all(r.error is None for r in records), [r.error for r in records]
    assert all(r.audio_s == pytest.approx(0.45, abs=0.01) and r.ttfa is not None for r in records)
    # The server's means over the run: its first audio comes before the client's, every request's
    # one piece went through the front end, and each model call ran one or two chunks.
    means = load_test.server_means(before, after)
    assert after["ttfa_count"] - before["ttfa_count"] == len(records)
    assert 0 < means["server_ttfa_mean_ms"] < 1e3 * max(r.ttfa for r in records)
    assert after["g2p_count"] - before["g2p_count"] == len(records) and means["g2p_mean_ms"] > 0
    assert 1 <= means["chunks_per_call"] <= 2
    # One chunk a request ("Hi."): its wait, then its run (the first chunk), within the request's first
    # audio; calls take time; the CPU backend has no graphs (no phase runs).
    assert after["wait_count"] - before["wait_count"] == len(records)
    assert 0 <= means["chunk_wait_mean_ms"] < means["server_ttfa_mean_ms"]
    assert after["first_count"] - before["first_count"] == len(records)
    assert means["chunk_wait_mean_ms"] < means["first_chunk_mean_ms"] < means["server_ttfa_mean_ms"]
    assert 0 < means["call_mean_ms"] < means["server_ttfa_mean_ms"]
    assert math.isnan(means["eager_phase_share"]) and "runs_eager" not in after
    summary = load_test.summarise("batched", 2, "pcm", records, wall, None, None, means)
    assert summary["g2p_mean_ms"] == means["g2p_mean_ms"]
    assert summary["errors"] == 0 and summary["requests"] == len(records)
    assert summary["audio_s_per_s"] == pytest.approx(0.45 * len(records) / wall)
    assert load_test.row(summary).startswith("| batched | 2 | pcm |")
    bad, _ = load_test.run_level(server.url, "wrong-key", "pcm", 1, 0.1, None, 1, ["Hi."],
                                 {"voice": "af_heart"})
    assert bad and bad[0].error.startswith("401")


def test_load_test_soak_samples_the_servers_memory(server):
    """scripts/load_test.py --soak's run on this server: memory sampled at start, during and after the
    load, with the server's responses counted."""
    import argparse

    from script_modules import load_script

    load_test = load_script("load_test")
    _wait_idle(server)
    args = argparse.Namespace(duration=3.0, warmup=0.0, sample_every=1.0, rate=None, client_procs=1,
                              api_key=API_KEY, corpus=["Hi."], voice_fields={"voice": "af_heart"})
    summary = load_test.soak(load_test.Target("batched", server.url, server), args, 2, "pcm")
    assert summary["errors"] == 0 and summary["requests"] > 0
    samples = summary["memory"]
    assert len(samples) >= 4 and samples[0]["at_s"] == 0 and samples[-1]["at_s"] >= 3.0
    assert all(m["server_rss_mb"] > 50 and m["front_end_rss_mb"] > 50 for m in samples)
    # Every request of the run was answered 200 by the server, counted between the first and last sample.
    assert samples[-1]["speech_ok"] - samples[0]["speech_ok"] == summary["requests"]
    assert samples[-1]["speech_failed"] == samples[0]["speech_failed"]


def test_engine_phase_runs_are_read_at_each_scrape():
    """kokoro_engine_phase_runs_total{run} comes from the backend's counts when /metrics is scraped
    (a CUDA engine's); before a source is set, or for a backend without graphs, it is absent."""
    from prometheus_client import generate_latest

    from kokoro_gpu.server.metrics import Metrics

    def scrape(m: Metrics) -> dict[str, float]:
        lines = generate_latest(m.registry).decode().splitlines()
        return {line.split('"')[1]: float(line.split()[-1])
                for line in lines if line.startswith("kokoro_engine_phase_runs_total{")}

    metrics = Metrics()
    assert scrape(metrics) == {}
    metrics.count_phase_runs(lambda: None)
    assert scrape(metrics) == {}
    counts = {"eager": 3, "captured": 1, "replayed": 7}
    metrics.count_phase_runs(lambda: dict(counts))
    assert scrape(metrics) == counts
    counts["replayed"] += 5
    assert scrape(metrics)["replayed"] == 12
