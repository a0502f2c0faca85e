"""kokoro-serve on Ray Serve: a local Ray cluster on 127.0.0.1, two CPU replicas behind Ray's HTTP proxy.

One cluster for the module (Ray takes about a minute to place two replicas on
two cores): the real ``openai`` client streams through the proxy and gets what
``KokoroTTS.synthesize`` makes; concurrent requests spread over both replicas
(each response names its replica, each replica's /metrics counts it); a
replica killed under load ends its streams with an error, the other replica
serves on, Ray starts a new one; shutting down leaves no process behind
(every process the cluster started inherits an environment marker that the
last test looks for). Every client call has a timeout, so nothing here hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
from server_helpers import pcm16

pytest.importorskip("ray.serve", reason="needs ray[serve] (the 'ray' extra)")
pytest.importorskip("fastapi")

import openai
import psutil
import ray
import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.serve.schema import ServeDeploySchema

from kokoro_gpu import KokoroTTS
from kokoro_gpu.errors import KokoroError
from kokoro_gpu.ray_serve import (
    APP_NAME,
    DEPLOYMENT_NAME,
    REPLICA_HEADER,
    ScaleOut,
    app_builder,
    builder_inputs,
    check_placement,
    deployment_options,
    failure_line,
    label_samples,
    parse_cli,
    replica_settings,
)
from kokoro_gpu.server.launcher import free_port
from kokoro_gpu.server.metrics import Metrics
from kokoro_gpu.server.settings import ServerSettings

try:
    import httpx2
except ImportError:  # openai before 3 reads bodies with httpx
    httpx2 = None

# What the openai client raises when a streamed body breaks off.
PROTOCOL_ERRORS = tuple(module.RemoteProtocolError for module in (httpx, httpx2) if module is not None)
CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "ray_serve.yaml"
MARKER = "KOKORO_RAY_TEST_CLUSTER"
TEXT = "Hi."
VOICE = "af_heart"
# Eight lines: eight chunks, several seconds of CPU synthesis per stream.
LONG_TEXT = "\n".join(["One.", "Two.", "Three.", "Four.", "Five.", "Six.", "Seven.", "Eight."])
SPEECH_ROUTE = "/v1/audio/speech"
DEPLOY_TIMEOUT_S = 360
MAX_ONGOING = 3
CLIENT_TIMEOUT_S = 120.0


# ----------------------------------------------------------------- no cluster


def test_metrics_get_a_replica_label_and_keep_everything_else():
    metrics = Metrics()
    metrics.requests.labels("/v1/audio/speech", "200").inc(3)
    metrics.batch_size.observe(4)
    metrics.audio_seconds.inc(1.5)
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    relabelled = label_samples(text, "replica", 'a"b\\c')

    def samples(exposition: str) -> dict:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(exposition) for s in family.samples}

    before, after = samples(text), samples(relabelled)
    assert len(after) == len(before) > 10
    for (name, labels), value in after.items():
        as_dict = dict(labels)
        assert as_dict.pop("replica") == 'a"b\\c'
        assert before[(name, tuple(sorted(as_dict.items())))] == value


def test_gpu_replicas_take_one_gpu_each_and_autoscale_by_default():
    settings = ServerSettings(device="cuda")
    options = deployment_options(settings, ScaleOut(max_replicas=4))
    assert options["ray_actor_options"]["num_gpus"] == 1
    assert "num_replicas" not in options
    autoscaling = options["autoscaling_config"]
    assert (autoscaling.min_replicas, autoscaling.max_replicas) == (1, 4)
    assert autoscaling.target_ongoing_requests == 32
    assert options["max_ongoing_requests"] == 128
    assert replica_settings(settings, ScaleOut()).g2p_workers == 8


def test_cpu_replicas_fixed_count_and_the_apps_stream_limit():
    settings = ServerSettings(device="cpu", max_streams=4)
    options = deployment_options(settings, ScaleOut(replicas=3, cpus_per_replica=2.5))
    assert options["num_replicas"] == 3 and "autoscaling_config" not in options
    assert options["ray_actor_options"] == {"num_gpus": 0, "num_cpus": 2.5}
    # Ray's per-replica limit binds before the app would answer 429.
    assert options["max_ongoing_requests"] == 4
    assert replica_settings(settings, ScaleOut(cpus_per_replica=2.5)).g2p_workers == 3


def test_config_file_is_a_valid_serve_config_for_the_builder():
    validate = getattr(ServeDeploySchema, "model_validate", None) or ServeDeploySchema.parse_obj  # pydantic 1
    config = validate(yaml.safe_load(CONFIG.read_text()))
    (application,) = config.applications
    assert application.import_path == "kokoro_gpu.ray_serve:app_builder"
    settings, scale = builder_inputs(application.args)
    assert (settings.model, settings.device, settings.precision) == ("hexgrad/Kokoro-82M", "auto", "fp32")
    assert (scale.replicas, scale.min_replicas, scale.max_replicas) == (None, 1, 8)
    assert (scale.target_ongoing_requests, scale.max_ongoing_requests) == (32, 128)


def test_builder_reads_serve_run_strings_and_refuses_bad_options():
    settings, scale = builder_inputs({"model": "m", "device": "cpu", "replicas": "2", "deterministic": "true",
                                      "max-streams": "9", "cpus_per_replica": "0.5"})
    assert (settings.model, settings.device, settings.deterministic, settings.max_streams) == ("m", "cpu",
                                                                                              True, 9)
    assert (scale.replicas, scale.cpus_per_replica) == (2, 0.5)
    with pytest.raises(SystemExit):
        builder_inputs({"device": "tpu"})


def test_command_line_takes_serve_and_ray_options():
    settings, scale, address = parse_cli(["--model", "m", "--device", "cpu", "--port", "9000", "--replicas",
                                          "2", "--address", "auto", "--max-streams", "16", "--strict",
                                          "--cpus-per-replica", "2.5"])
    assert (settings.model, settings.device, settings.port, settings.max_streams) == ("m", "cpu", 9000, 16)
    assert settings.max_input_chars == 4096
    assert (scale.replicas, scale.cpus_per_replica, scale.max_replicas, address) == (2, 2.5, None, "auto")
    with pytest.raises(SystemExit) as exit_info:
        parse_cli(["--replicas", "two"])
    assert exit_info.value.code == 2


def test_cuda_replicas_that_the_cluster_cannot_place_are_refused():
    with pytest.raises(KokoroError, match="3 CUDA replicas need 3 GPUs and the Ray cluster has 0"):
        check_placement(ServerSettings(device="cuda"), ScaleOut(replicas=3))
    check_placement(ServerSettings(device="cpu"), ScaleOut(replicas=3))


def test_a_failed_deployment_is_told_by_the_replicas_error():
    ray_message = ("Deploying application kokoro failed: Failed to update the deployments ['kokoro'].\n"
                   "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                   "kokoro_gpu.errors.CheckpointError: model path /m does not exist; pass a directory\n")
    assert failure_line(RuntimeError(ray_message)) == "model path /m does not exist; pass a directory"
    assert failure_line(RuntimeError("Deploying failed.\n")) == "Deploying failed."


def test_command_with_a_missing_model_exits_2_in_one_line(tmp_path):
    argv = [sys.executable, "-m", "kokoro_gpu.ray_serve", "--model", str(tmp_path / "no"), "--device", "cpu"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("kokoro-serve: error: model path")


# -------------------------------------------------------------- local cluster


@dataclass
class Cluster:
    """The module's Ray cluster and Serve app; ``stop`` shuts both down (once)."""

    url: str
    marker: str
    stopped: bool = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            serve.shutdown()
            ray.shutdown()


def cluster_processes(marker: str) -> list[psutil.Process]:
    """Processes (not this one) whose environment carries the cluster's marker."""
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if process.pid != os.getpid() and process.environ().get(MARKER) == marker:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


@pytest.fixture(scope="module")
def cluster(demo_model_dir):
    marker = uuid.uuid4().hex
    port = free_port()
    with pytest.MonkeyPatch.context() as env:
        # Inherited by Ray's GCS and raylet (started below) and so by every worker and their children.
        env.setenv(MARKER, marker)
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="warning")
    cluster = Cluster(url=f"http://127.0.0.1:{port}", marker=marker)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # At most MAX_ONGOING streams a replica: more concurrent requests than that reach both.
        app = app_builder({"model": str(demo_model_dir), "device": "cpu", "replicas": 2,
                           "cpus_per_replica": 0.5, "g2p_workers": 1, "log_level": "warning",
                           "max_ongoing_requests": MAX_ONGOING})
        # serve.run waits for the replicas without a time limit: bound it.
        failure: list[BaseException] = []

        def deploy() -> None:
            try:
                serve.run(app, name=APP_NAME, route_prefix="/")
            except BaseException as e:
                failure.append(e)

        deployer = threading.Thread(target=deploy, daemon=True)
        deployer.start()
        deployer.join(DEPLOY_TIMEOUT_S)
        assert not deployer.is_alive(), f"replicas not running after {DEPLOY_TIMEOUT_S} s: {serve.status()}"
        assert not failure, f"deployment failed: {failure[0]}"
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def client(cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{cluster.url}/v1", api_key="unused", max_retries=0,
                         timeout=CLIENT_TIMEOUT_S)


@pytest.fixture(scope="module")
def tts(demo_model_dir) -> KokoroTTS:
    return KokoroTTS.from_pretrained(demo_model_dir, device="cpu")


def speak(client: openai.OpenAI, seed: int, text: str = TEXT) -> tuple[str, np.ndarray]:
    """(replica that answered, pcm samples) of one streamed request."""
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice=VOICE, input=text, response_format="pcm",
            extra_body={"seed": seed}) as response:
        assert response.status_code == 200
        replica = response.headers[REPLICA_HEADER]
        data = b"".join(response.iter_bytes())
    return replica, np.frombuffer(data, dtype="<i2")


def speech_counts(cluster: Cluster, replicas: int = 2, timeout: float = 60) -> dict[str, float]:
    """Each replica's count of answered speech requests, from its /metrics (asked until all answered)."""
    counts: dict[str, float] = {}
    end = time.monotonic() + timeout
    with ThreadPoolExecutor(4) as pool:
        while len(counts) < replicas:
            assert time.monotonic() < end, f"/metrics reached only replicas {sorted(counts)}"
            for text in pool.map(lambda _: httpx.get(f"{cluster.url}/metrics", timeout=10).text, range(4)):
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        replica = sample.labels["replica"]
                        counts.setdefault(replica, 0.0)
                        if sample.name == "kokoro_requests_total" and (
                                sample.labels["route"], sample.labels["status"]) == (SPEECH_ROUTE, "200"):
                            counts[replica] = sample.value
    return counts


def replica_ids() -> set[str]:
    prefix = f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#"
    return {a["name"][len(prefix):] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(prefix)}


@pytest.mark.slow
def test_openai_client_streams_through_the_proxy_equal_to_synthesize(cluster, client, tts):
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda seed: speak(client, seed), (1, 2)))
    for seed, (replica, pcm) in zip((1, 2), got, strict=True):
        assert replica in replica_ids()
        np.testing.assert_array_equal(pcm, pcm16(tts.synthesize(TEXT, voice=VOICE, seed=seed).audio))


@pytest.mark.slow
def test_requests_spread_over_both_replicas(cluster, client, tts):
    before = speech_counts(cluster)
    assert set(before) == replica_ids()
    with ThreadPoolExecutor(2 * MAX_ONGOING) as pool:
        got = list(pool.map(lambda _: speak(client, 3), range(2 * MAX_ONGOING)))
    want = pcm16(tts.synthesize(TEXT, voice=VOICE, seed=3).audio)
    for _, pcm in got:
        np.testing.assert_array_equal(pcm, want)
    served = Counter(replica for replica, _ in got)
    assert set(served) == set(before), f"requests went to {dict(served)} only"
    after = speech_counts(cluster)
    assert {r: after[r] - before[r] for r in before} == {r: served[r] for r in before}


@dataclass
class StreamRun:
    """One long speech stream read in a thread: which replica, how many bytes, how it ended."""

    client: openai.OpenAI
    seed: int
    replica: str | None = None
    received: int = 0
    error: BaseException | None = None
    finished: float | None = None
    opened: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            with self.client.audio.speech.with_streaming_response.create(
                    model="kokoro", voice=VOICE, input=LONG_TEXT, response_format="pcm",
                    extra_body={"seed": self.seed}) as response:
                self.replica = response.headers[REPLICA_HEADER]
                for chunk in response.iter_bytes():
                    self.received += len(chunk)
                    self.opened.set()
        except BaseException as e:
            self.error = e
        finally:
            self.finished = time.monotonic()
            self.opened.set()


@pytest.mark.slow
def test_killed_replica_ends_its_streams_with_an_error_and_comes_back(cluster, client, tts):
    runs = [StreamRun(client, seed) for seed in range(10, 11 + MAX_ONGOING)]  # some on each replica
    threads = [threading.Thread(target=run.run, daemon=True) for run in runs]
    for thread in threads:
        thread.start()
    for run in runs:
        assert run.opened.wait(120), "a stream sent no audio in 120 s"
    assert all(run.error is None and run.finished is None for run in runs), [r.error for r in runs]
    victim = runs[0].replica
    assert victim in replica_ids()
    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#{victim}", namespace="serve"),
             no_restart=True)
    killed_at = time.monotonic()
    for thread in threads:
        thread.join(CLIENT_TIMEOUT_S + 30)
        assert not thread.is_alive(), "a stream hung after its replica was killed"
    for run in runs:
        if run.replica == victim:
            # The proxy drops the connection mid-body: the client sees an incomplete chunked read.
            assert isinstance(run.error, PROTOCOL_ERRORS), repr(run.error)
            assert run.finished - killed_at < 30, "the stream's error came late"
        else:
            assert run.error is None and run.received > 0, run.error

    # New requests go to the replica that lives while Ray replaces the other.
    replica, pcm = speak(client, 4)
    assert replica != victim
    np.testing.assert_array_equal(pcm, pcm16(tts.synthesize(TEXT, voice=VOICE, seed=4).audio))

    end = time.monotonic() + DEPLOY_TIMEOUT_S
    while True:
        deployment = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME]
        ids = replica_ids()
        if deployment.replica_states.get("RUNNING") == 2 and len(ids) == 2 and victim not in ids:
            break
        assert time.monotonic() < end, f"no replacement replica after {DEPLOY_TIMEOUT_S} s: {deployment}"
        time.sleep(1)
    assert httpx.get(f"{cluster.url}/health", timeout=10).status_code == 200


@pytest.mark.slow
def test_shutdown_leaves_no_process_behind(cluster):
    started = cluster_processes(cluster.marker)
    names = " ".join(p.name() for p in started)
    assert "gcs_server" in names and "raylet" in names and "ServeReplica" in names, names
    cluster.stop()
    end = time.monotonic() + 60
    while (left := cluster_processes(cluster.marker)) and time.monotonic() < end:
        time.sleep(0.5)
    assert not left, [f"{p.pid} {p.name()}" for p in left]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{cluster.url}/health", timeout=5)


@pytest.mark.slow
def test_the_command_serves_and_stops_on_sigterm(demo_model_dir, tts, tmp_path):
    """``python -m kokoro_gpu.ray_serve`` (after the module's cluster is gone): a local cluster, one
    replica, the openai client, SIGTERM -> exit 0 and no process left."""
    marker = uuid.uuid4().hex
    port = free_port()
    log = tmp_path / "ray_serve.log"
    argv = [sys.executable, "-m", "kokoro_gpu.ray_serve", "--model", str(demo_model_dir), "--device", "cpu",
            "--replicas", "1", "--cpus-per-replica", "0.5", "--g2p-workers", "1", "--port", str(port),
            "--log-level", "warning"]
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, MARKER: marker})
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + DEPLOY_TIMEOUT_S
        while not _healthy(url):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < end, f"not serving in {DEPLOY_TIMEOUT_S} s: {log.read_text()[-3000:]}"
            time.sleep(1)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                               timeout=CLIENT_TIMEOUT_S)
        _, pcm = speak(client, 5)
        np.testing.assert_array_equal(pcm, pcm16(tts.synthesize(TEXT, voice=VOICE, seed=5).audio))
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    end = time.monotonic() + 60
    while (left := cluster_processes(marker)) and time.monotonic() < end:
        time.sleep(0.5)
    assert not left, [f"{p.pid} {p.name()}" for p in left]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
