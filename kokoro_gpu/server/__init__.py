"""``kokoro-serve``: an OpenAI-compatible speech server batching concurrent requests on one model.

The app lives in ``kokoro_gpu.server.app`` (``create_app``); its web stack is the
``serve`` extra, so ``main`` checks for it before importing it.
"""

from __future__ import annotations

import sys

from .settings import ServerSettings

__all__ = ["ServerSettings", "main"]


def main(argv: list[str] | None = None) -> int:
    try:
        from .app import main as serve
    except ModuleNotFoundError as e:
        print(f"kokoro-serve: error: the server needs {e.name}; "
              "install it with: pip install 'kokoro-gpu[serve]'", file=sys.stderr)
        return 2
    return serve(argv)
