"""``python -m kokoro_gpu.server``: the same as ``kokoro-serve``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
