"""``kokoro-serve`` on Ray Serve: the same app, one replica per GPU, on a Ray cluster.

Ray Serve wraps the ASGI app unchanged (``@serve.ingress``), streams its
responses through Ray's HTTP proxy, places one replica per GPU
(``num_gpus: 1``), autoscales on ongoing requests per replica and restarts
replicas that fail. Each replica loads its own model in its constructor and
runs its own app (scheduler, continuous batching, front-end processes), built
in the replica around that model.

What the deployment adds to the app, around it and without changing it:

- ``check_health``: Ray's periodic health check calls the app's own
  ``GET /health`` in process (so a wedged event loop or a draining app fails
  it and Ray replaces the replica). Readiness: a replica receives traffic only
  once its constructor and the app's start-up (model, front end) are done.
- Every response carries ``x-kokoro-replica`` (the Serve replica id), and each
  replica's ``GET /metrics`` gives the app's Prometheus metrics with a
  ``replica`` label; Ray's own per-replica metrics (``ray_serve_*``) are on
  each node's metrics export port.

Start it with ``python -m kokoro_gpu.ray_serve --replicas N --model DIR`` (all
of ``kokoro-serve``'s options are accepted), or ``serve run
deploy/ray_serve.yaml`` (``app_builder`` below).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import math
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, fields, replace
from typing import Any

try:
    from fastapi import FastAPI
    from ray import serve
    from ray.serve.config import AutoscalingConfig
    from ray.serve.deployment import Application
except ModuleNotFoundError as missing:
    if __name__ != "__main__":
        raise
    print(f"kokoro-serve: error: Ray Serve needs {missing.name}; install it with: "
          "pip install 'kokoro-gpu[ray]'", file=sys.stderr)
    sys.exit(2)

from .checkpoint import resolve_model
from .errors import KokoroError
from .server.app import create_app, load_model
from .server.settings import ServerSettings, build_parser, settings_from_args, settings_from_namespace

logger = logging.getLogger("kokoro_gpu.ray_serve")

DEPLOYMENT_NAME = "kokoro"
APP_NAME = "kokoro"
REPLICA_HEADER = "x-kokoro-replica"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class ScaleOut:
    """How the app is spread over the cluster; ``None`` fields take the device's default.

    ``replicas`` fixes the replica count; without it the deployment autoscales
    between ``min_replicas`` and ``max_replicas`` on ``target_ongoing_requests``
    (streams in progress per replica).
    """

    replicas: int | None = None
    min_replicas: int = 1
    max_replicas: int | None = None
    target_ongoing_requests: float | None = None
    max_ongoing_requests: int | None = None
    # Requests waiting in Ray's routers beyond every replica's max_ongoing_requests (503 past it).
    max_queued_requests: int = 1024
    gpus_per_replica: float | None = None
    cpus_per_replica: float | None = None
    health_check_period_s: float = 10.0
    health_check_timeout_s: float = 30.0
    # A bad model fails the deployment after this many constructor attempts instead of Ray's 20.
    max_constructor_retry_count: int = 3


@dataclass(frozen=True)
class DeviceDefaults:
    """Per-replica defaults by device: a GPU replica batches dozens of streams, a CPU one a few."""

    gpus: float
    cpus: float
    target_ongoing_requests: float
    max_ongoing_requests: int


GPU_DEFAULTS = DeviceDefaults(gpus=1, cpus=8, target_ongoing_requests=32, max_ongoing_requests=128)
CPU_DEFAULTS = DeviceDefaults(gpus=0, cpus=1, target_ongoing_requests=2, max_ongoing_requests=8)


def _cluster_gpus() -> int:
    import ray

    return int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when the connected cluster (else this machine) has a usable GPU, else ``cpu``."""
    if device != "auto":
        return device
    if _cluster_gpus() > 0:
        return "cuda"
    from .backends import cuda_state

    return "cuda" if cuda_state().usable else "cpu"


def deployment_options(settings: ServerSettings, scale: ScaleOut) -> dict[str, Any]:
    """``@serve.deployment`` options for ``settings`` (device already resolved) and ``scale``."""
    defaults = GPU_DEFAULTS if settings.device == "cuda" else CPU_DEFAULTS
    gpus = defaults.gpus if scale.gpus_per_replica is None else scale.gpus_per_replica
    cpus = defaults.cpus if scale.cpus_per_replica is None else scale.cpus_per_replica
    # Ray's limit binds before the app's own 429 (max_streams).
    max_ongoing = min(scale.max_ongoing_requests or defaults.max_ongoing_requests, settings.max_streams)
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": {"num_gpus": gpus, "num_cpus": cpus},
        "max_ongoing_requests": max_ongoing,
        "max_queued_requests": scale.max_queued_requests,
        "health_check_period_s": scale.health_check_period_s,
        "health_check_timeout_s": scale.health_check_timeout_s,
        "graceful_shutdown_timeout_s": settings.graceful_timeout_s,
        "logging_config": {"log_level": settings.log_level.upper()},
    }
    if "max_constructor_retry_count" in inspect.signature(serve.deployment).parameters:  # not in Ray 2.40
        options["max_constructor_retry_count"] = scale.max_constructor_retry_count
    if scale.replicas is not None:
        options["num_replicas"] = scale.replicas
    else:
        max_replicas = scale.max_replicas or max(scale.min_replicas, _cluster_gpus() if gpus else 1, 1)
        target = scale.target_ongoing_requests or defaults.target_ongoing_requests
        options["autoscaling_config"] = AutoscalingConfig(
            min_replicas=scale.min_replicas, max_replicas=max_replicas, target_ongoing_requests=target)
    return options


def replica_settings(settings: ServerSettings, scale: ScaleOut) -> ServerSettings:
    """The settings each replica's app gets: the device resolved, front-end processes sized to the replica's
    CPUs (not the node's cores, which its other replicas share)."""
    device = resolve_device(settings.device)
    if settings.g2p_workers is not None:
        return replace(settings, device=device)
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    cpus = defaults.cpus if scale.cpus_per_replica is None else scale.cpus_per_replica
    return replace(settings, device=device, g2p_workers=max(1, math.ceil(cpus)))


class ReplicaTag:
    """ASGI middleware: ``x-kokoro-replica`` on every response, a ``replica`` label on ``/metrics``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], replica: str) -> None:
        self.app = app
        self.replica = replica
        self._header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        relabel = scope["path"] == "/metrics"
        start: dict[str, Any] = {}
        body = bytearray()

        async def tagging_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._header]}
                if relabel:
                    start.update(message)  # sent with the relabelled body and its new length
                    return
            elif message["type"] == "http.response.body" and relabel:
                body.extend(message.get("body", b""))
                if message.get("more_body", False):
                    return
                data = label_samples(body.decode(), "replica", self.replica).encode()
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", str(len(data)).encode())]})
                message = {"type": "http.response.body", "body": data}
            await send(message)

        await self.app(scope, receive, tagging_send)


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{?)")


def label_samples(text: str, name: str, value: str) -> str:
    """Prometheus text exposition with ``name="value"`` added to every sample's labels."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    label = f'{name}="{escaped}"'
    lines = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or line.startswith("#"):
            lines.append(line)
        elif m.group(2):
            rest = line[m.end():]
            lines.append(f"{m.group(1)}{{{label}{'' if rest.startswith('}') else ','}{rest}")
        else:
            lines.append(f"{m.group(1)}{{{label}}}{line[m.end():]}")
    return "\n".join(lines) + "\n"


async def asgi_get(app: Callable[[Scope, Receive, Send], Awaitable[None]], path: str) -> tuple[int, bytes]:
    """``GET path`` on an ASGI app in this process: (status, body)."""
    status = 0
    body = bytearray()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"replica")], "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}
    await app(scope, receive, send)
    return status, bytes(body)


# The app of the replica in this process (Ray runs each replica in its own worker process), built by
# the replica's constructor around its model. ``@serve.ingress`` is given ``ReplicaApp()``, which
# forwards every ASGI call (lifespan included) to it: an app made per replica, on Ray releases both
# before and after late-bound ingress apps (2.6x's ``__serve_build_asgi_app__``).
_replica_app: FastAPI | None = None


def _set_replica_app(app: FastAPI) -> None:
    # A module function, so that the constructor reaches this module's global: Ray ships the deployment
    # class by value, with a copy of the globals its methods name.
    global _replica_app
    _replica_app = app


class ReplicaApp:
    """The ASGI app of this process's replica (see ``_replica_app``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _replica_app is None:
            raise RuntimeError("the replica's app is built in KokoroReplica's constructor, which has not run")
        await _replica_app(scope, receive, send)


def replica_id() -> str:
    """This replica's Serve id (``replica_tag`` in older Ray releases)."""
    context = serve.get_replica_context()
    replica = getattr(context, "replica_id", None)
    return replica.unique_id if replica is not None else context.replica_tag


@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress(ReplicaApp())
class KokoroReplica:
    """One replica: its own model (loaded here, on the replica's GPU) and its own ``kokoro-serve`` app."""

    def __init__(self, settings: ServerSettings) -> None:
        self._replica = replica_id()
        tts = load_model(settings)
        logger.info("kokoro_gpu: replica %s loaded %s on %s", self._replica, settings.model, tts.device)
        self._app = create_app(settings, tts)
        self._app.add_middleware(ReplicaTag, replica=self._replica)
        _set_replica_app(self._app)

    async def check_health(self) -> None:
        """Ray's health check: the app's own ``GET /health`` must answer 200."""
        status, body = await asgi_get(self._app, "/health")
        if status != 200:
            raise RuntimeError(f"replica {self._replica}: /health answered {status}: {body[:200]!r}")


def build_app(replica: ServerSettings, scale: ScaleOut) -> Application:
    """The Serve application: ``KokoroReplica`` with options for ``replica``'s device and ``scale``.

    ``replica``: the settings each replica gets, as ``replica_settings`` makes them."""
    return KokoroReplica.options(**deployment_options(replica, scale)).bind(replica)


_SCALE_FIELDS = {f.name: f for f in fields(ScaleOut)}


def app_builder(args: dict[str, Any]) -> Application:
    """``serve run`` / ``serve deploy`` entry point: ``args`` are ``kokoro-serve`` options by name
    (``model``, ``device``, ``max_streams``, ...) and ``ScaleOut`` fields (``replicas``, ...)."""
    settings, scale = builder_inputs(args)
    return build_app(replica_settings(settings, scale), scale)


def builder_inputs(args: dict[str, Any]) -> tuple[ServerSettings, ScaleOut]:
    """``app_builder``'s arguments (from YAML, or strings from ``serve run ... key=value``) as settings,
    checked by ``kokoro-serve``'s own parser."""
    argv: list[str] = []
    scale: dict[str, Any] = {}
    for key, value in args.items():
        name = key.replace("-", "_")
        flag = f"--{name.replace('_', '-')}"
        if name in _SCALE_FIELDS:
            kind = float if "float" in str(_SCALE_FIELDS[name].type) else int
            scale[name] = None if value is None else kind(value)
        elif value is True or str(value).lower() == "true":
            argv.append(flag)
        elif value is not None and value is not False and str(value).lower() != "false":
            argv += [flag, str(value)]
    return settings_from_args(argv), ScaleOut(**scale)


def _add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Ray Serve")
    g.add_argument("--address", default=None,
                   help="Ray cluster to join ('auto': the one started on this machine with 'ray start'; "
                   "default: start a local one)")
    g.add_argument("--replicas", type=int, default=None,
                   help="fixed number of replicas (default: autoscale, one replica per GPU at most)")
    g.add_argument("--min-replicas", type=int, default=1)
    g.add_argument("--max-replicas", type=int, default=None,
                   help="autoscaling ceiling (default: the cluster's GPUs, 1 on CPU)")
    g.add_argument("--target-ongoing-requests", type=float, default=None,
                   help="streams per replica the autoscaler aims at (default 32 on CUDA, 2 on CPU)")
    g.add_argument("--max-ongoing-requests", type=int, default=None,
                   help="streams one replica takes at once (default 128 on CUDA, 8 on CPU)")
    g.add_argument("--gpus-per-replica", type=float, default=None)
    g.add_argument("--cpus-per-replica", type=float, default=None,
                   help="also the replica's front-end processes (default 8 on CUDA, 1 on CPU)")


def build_cli_parser() -> argparse.ArgumentParser:
    """``kokoro-serve``'s options plus the Ray Serve ones, for ``--help`` and checking the whole line."""
    parser = argparse.ArgumentParser(
        prog="python -m kokoro_gpu.ray_serve", parents=[build_parser()], conflict_handler="resolve",
        description="kokoro-serve on Ray Serve: one replica per GPU behind Ray's HTTP proxy "
        "on --host/--port.")
    _add_scale_arguments(parser)
    return parser


def parse_cli(argv: list[str] | None) -> tuple[ServerSettings, ScaleOut, str | None]:
    args = build_cli_parser().parse_args(argv)  # every error (and --help) with the full usage
    scale = ScaleOut(**{name: getattr(args, name) for name in _SCALE_FIELDS if hasattr(args, name)})
    return settings_from_namespace(args), scale, args.address


class _Stop(Exception):
    """SIGINT or SIGTERM: stop serving."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stop


def failure_line(error: BaseException) -> str:
    """One line for a failed deployment: the replica's ``KokoroError`` where Ray's message carries it."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("kokoro_gpu.errors.")]
    return (ours[-1].split(": ", 1)[-1] if ours else lines[-1] if lines else type(error).__name__)[:500]


def check_placement(settings: ServerSettings, scale: ScaleOut) -> None:
    """GPU replicas that the cluster cannot place would leave ``serve.run`` waiting: refuse them first."""
    if settings.device != "cuda":
        return
    options = deployment_options(settings, scale)
    replicas = options.get("num_replicas") or options["autoscaling_config"].min_replicas
    needed = replicas * options["ray_actor_options"]["num_gpus"]
    if needed > _cluster_gpus():
        raise KokoroError(f"{replicas} CUDA replicas need {needed:g} GPUs and the Ray cluster has "
                          f"{_cluster_gpus()}; join GPU machines (ray start --address=HEAD:6379), "
                          "ask for fewer replicas, or use --device cpu")


def main(argv: list[str] | None = None) -> int:
    """Start (or join) a Ray cluster, deploy the app behind Ray's proxy on --host/--port, serve until
    SIGINT/SIGTERM, then shut Serve down (draining replicas) and leave the cluster.

    Exit 2 with one line when the model does not resolve on this machine (a local path must be at the
    same place on every machine that runs a replica), the replicas cannot be placed, or they fail."""
    import ray

    settings, scale, address = parse_cli(argv)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        resolve_model(settings.model, local_files_only=settings.local_files_only)
    except KokoroError as e:
        print(f"kokoro-serve: error: {e}", file=sys.stderr)
        return 2
    try:
        # "local": a new cluster, never one that an earlier `ray start` on this machine left recorded.
        ray.init(address=address or "local", include_dashboard=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError) as e:
        print(f"kokoro-serve: error: cannot join the Ray cluster at {address}: {failure_line(e)}; is it "
              "started (ray start --head), and with token authentication, is RAY_AUTH_MODE=token set here "
              "with the head's ~/.ray/auth_token?", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)  # after ray.init, which installs its own SIGTERM handler
    try:
        replica = replica_settings(settings, scale)  # the device resolved once, for placement and replicas
        check_placement(replica, scale)
        serve.start(http_options={"host": settings.host, "port": settings.port})
        serve.run(build_app(replica, scale), name=APP_NAME, route_prefix="/")
        logger.info("kokoro_gpu: serving on http://%s:%d through Ray Serve", settings.host, settings.port)
        threading.Event().wait()
    except _Stop:
        return 0
    except KokoroError as e:
        print(f"kokoro-serve: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"kokoro-serve: error: the deployment failed: {failure_line(e)}", file=sys.stderr)
        return 2
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # shutting down already; bounded by graceful_timeout
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    # Run the importable module's main: Ray ships a deployment class defined in __main__ by value,
    # and the replica's app would not reach ReplicaApp.
    from kokoro_gpu.ray_serve import main as module_main

    sys.exit(module_main())
