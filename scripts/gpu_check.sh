#!/usr/bin/env bash
# The GPU check, meant as ONE call on a CUDA machine (repository root as the
# working directory): build and install the package for sm_90a only, with the
# ops' test bindings (no build isolation: the machine has no network), then,
# on the INSTALLED package, print backend_info, run the GPU tests (marker gpu:
# engine and op families; plus backend selection, the precision plan and the
# golden parity tests), print the parity table in both precisions, and run
# scripts/bench.py --phases (against PyTorch when the official kokoro is importable).
# Usage: scripts/gpu_check.sh [extra pytest arguments]
set -euo pipefail
export PYTHONUNBUFFERED=1
R="$(cd "$(dirname "$0")/.." && pwd)"
cd "$R"

python -m pip install --no-build-isolation --no-deps -q \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90a -Ccmake.define.KOKORO_REQUIRE_NATIVE=ON \
    -Ccmake.define.KOKORO_OPS_BINDINGS=ON .

# From /tmp, so that the source tree does not shadow the installed package.
cd /tmp
python - <<'PY'
import json
import kokoro_gpu
print(json.dumps(kokoro_gpu.backend_info(), indent=1))
PY

# The gpu-marked files by name pattern (collecting all of tests/ would import
# the server tests' dependencies too), then backend selection, the plan and
# the golden parity tests.
status=0
python -m pytest -q -s -m gpu "$R"/tests/test_cuda_engine.py "$R"/tests/test_native_ops_*.py \
    "$@" || status=$?
python -m pytest -q -s "$R/tests/test_backends.py" "$R/tests/test_parity.py" \
    "$R/tests/test_precision_plan.py" "$R/tests/test_conv_relayout.py" "$@" || status=$?

if [[ -f "$R/scripts/parity_table.py" ]]; then
    for precision in fp32 fast; do
        python "$R/scripts/parity_table.py" --device cuda --precision "$precision" || status=$?
    done
fi

# Latency against PyTorch (when the official kokoro is importable) in both
# precisions, with the engine's per-phase breakdown: the benchmark of the
# performance issue.
bench=("$R/scripts/bench.py" --precision fp32,fast --phases)
[[ -n "${OUT:-}" ]] && bench+=(--json "$OUT/bench.json" --md "$OUT/bench.md")
python "${bench[@]}" || status=$?
exit $status
