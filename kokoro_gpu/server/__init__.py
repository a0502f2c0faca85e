"""``kokoro-serve``: an OpenAI-compatible speech server batching concurrent requests on one model.

The app lives in ``kokoro_gpu.server.app`` (``create_app``); its web stack is the
``serve`` extra, so ``main`` checks for it before importing it.
"""

from __future__ import annotations

import sys

from .settings import ServerSettings

__all__ = ["ServerSettings", "main"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--ray" in argv:  # the same app on Ray Serve, one replica per GPU (the 'ray' extra)
        try:
            from ..ray_serve import main as ray_main
        except ModuleNotFoundError as e:
            print(f"kokoro-serve: error: --ray needs {e.name}; "
                  "install it with: pip install 'kokoro-gpu[ray]'", file=sys.stderr)
            return 2
        return ray_main([a for a in argv if a != "--ray"])
    try:
        from .app import main as serve
    except ModuleNotFoundError as e:
        print(f"kokoro-serve: error: the server needs {e.name}; "
              "install it with: pip install 'kokoro-gpu[serve]'", file=sys.stderr)
        return 2
    return serve(argv)
