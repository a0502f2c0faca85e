#!/usr/bin/env bash
# The GPU check, meant as ONE call on a CUDA machine (repository root as the
# working directory): build and install the package for sm_90 only (no build
# isolation: the machine has no network), then, on the INSTALLED package,
# print backend_info, run the GPU tests (engine, ops, backend selection, and
# the golden parity tests), print the parity table, and measure the engine's
# latency (median of 5 runs after warm-up, ~30 / ~150 / ~500 phonemes).
# Usage: scripts/gpu_check.sh [extra pytest arguments]
set -euo pipefail
export PYTHONUNBUFFERED=1
R="$(cd "$(dirname "$0")/.." && pwd)"
cd "$R"

python -m pip install --no-build-isolation --no-deps -q \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 -Ccmake.define.KOKORO_REQUIRE_NATIVE=ON .

# From /tmp, so that the source tree does not shadow the installed package.
cd /tmp
python - <<'PY'
import json
import kokoro_gpu
print(json.dumps(kokoro_gpu.backend_info(), indent=1))
PY

tests=()
for t in test_cuda_engine test_native_ops test_backends test_parity; do
    [[ -f "$R/tests/$t.py" ]] && tests+=("$R/tests/$t.py")
done
status=0
python -m pytest -q -s "${tests[@]}" "$@" || status=$?

if [[ -f "$R/scripts/parity_table.py" ]]; then
    python "$R/scripts/parity_table.py" --device cuda || status=$?
fi

KOKORO_TESTS="$R/tests" python - <<'PY' || status=$?
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.environ["KOKORO_TESTS"])
from test_cuda_engine import full_size_weights, random_inputs  # noqa: E402

from kokoro_gpu.backends import create_backend  # noqa: E402
from kokoro_gpu.config import SAMPLE_RATE, ModelConfig  # noqa: E402

config = ModelConfig.load()
backend = create_backend("cuda", config, full_size_weights(config))
print("\nlatency (deterministic, fp32; median of 5 after warm-up):")
print(f"{'phonemes':>9} {'frames':>7} {'audio s':>8} {'median ms':>10} {'min ms':>8} {'x realtime':>11}")
for n in (30, 150, 500):
    ids, ref_s = random_inputs(config, n, seed=n)
    for _ in range(2):
        audio, durations = backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        audio, durations = backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
        times.append(time.perf_counter() - t0)
    seconds = audio.size / SAMPLE_RATE
    med = statistics.median(times)
    print(f"{n:>9} {int(durations.sum()):>7} {seconds:>8.2f} {1e3 * med:>10.1f} {1e3 * min(times):>8.1f}"
          f" {seconds / med:>11.0f}")
    assert np.all(np.isfinite(audio))
PY
exit $status
