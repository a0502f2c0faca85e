#!/usr/bin/env bash
# The GPU check, meant as ONE call on a CUDA machine (repository root as the
# working directory): build and install the package for sm_90a only (no build
# isolation: the machine has no network), then, on the INSTALLED package,
# print backend_info, run the GPU tests (engine, ops, backend selection, and
# the golden parity tests), print the parity table in both precisions, and run
# scripts/bench.py --phases (against PyTorch when the official kokoro is importable).
# Usage: scripts/gpu_check.sh [extra pytest arguments]
set -euo pipefail
export PYTHONUNBUFFERED=1
R="$(cd "$(dirname "$0")/.." && pwd)"
cd "$R"

python -m pip install --no-build-isolation --no-deps -q \
    -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90a -Ccmake.define.KOKORO_REQUIRE_NATIVE=ON .

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
