#!/usr/bin/env bash
# A/B of the engine in one call on a GPU machine: the working tree (B)
# against a base revision (A), each built apart, then scripts/bench.py (or
# bench_traffic.py) run in alternating rounds A, B, A, B, ... on the same warm
# GPU. Timings compare only within one such call (docs/PERFORMANCE.md: the
# batch moves by a few percent between machines and runs), and a difference
# smaller than the spread between rounds of one side is noise.
#
#   scripts/ab_bench.sh prepare REV    # here: .ab/base.patch, the change since REV
#   scripts/ab_bench.sh run [ROUNDS]   # there (default 2 rounds); carry .ab
#
# The device machine gets the working tree without .git, so `prepare` writes
# the change since REV (the engine's sources and the package) into .ab/
# (git-ignored), and `run` rebuilds A by reversing it on a copy of the tree.
# Environment of `run`:
#   BENCH       bench (default: scripts/bench.py) or traffic
#               (scripts/bench_traffic.py: (a) - (c) of mixed lengths; every
#               round's arrivals (c) at the capacity that A's first round
#               measured, so that both sides meet the same offered load)
#   BENCH_ARGS  bench.py's arguments (default: the medium and batch cases in
#               fast precision, 20 repeats, no PyTorch)
#   TRAFFIC_ARGS  bench_traffic.py's (default: --rounds 3 --first-seen 80
#               --arrival-seconds 4; the corpus is tests/data/traffic_phonemes.json)
#   MODEL       bench_traffic.py's model (default: a random-weights model
#               directory written there; kokoro-onnx-int8 where its packages
#               are installed)
#   TESTS       pytest paths (relative to the repository) run on B before the
#               rounds, e.g. "tests/test_cuda_engine.py tests/test_native_ops.py"
#   ARCH        CMAKE_CUDA_ARCHITECTURES (default 90a)
#   NATIVE      0: both built without the engine (a CPU smoke test of this
#               script, e.g. with TRAFFIC_ARGS="--device cpu --quick")
#   PROFILE     after the rounds, each side's scripts/host_profile.py run
#               under py-spy (on the PATH, or the PYSPY path; pip install
#               py-spy), its summary to stdout and the profile to $OUT
#   PROFILE_ARGS  host_profile.py run's arguments (default: --seconds 5)
#   AB_WORK     the work directory (default: a new temporary one); a side
#               already built there is reused, so that a second call on the
#               same warm machine skips both builds
# Per round and side the bench table's rows go to stdout, prefixed "A1", "B1",
# ... (a failed run: the end of its output to stderr); with $OUT set, each
# round's JSON goes there too.
set -uo pipefail
R="$(cd "$(dirname "$0")/.." && pwd)"
PATCH="$R/.ab/base.patch"
SOURCES=(native kokoro_gpu build_backend CMakeLists.txt pyproject.toml README.md)

usage() {
    echo "usage: scripts/ab_bench.sh prepare REV | run [ROUNDS]" >&2
    exit 2
}

on_side() {  # a or b, then a command run on that side's build
    local side="$1"
    shift
    PYTHONPATH="$work/site_$side${PYTHONPATH:+:$PYTHONPATH}" "$@"
}

build() {  # source directory, target directory
    local engine=(-Ccmake.define.CMAKE_CUDA_ARCHITECTURES="${ARCH:-90a}"
                  -Ccmake.define.KOKORO_REQUIRE_NATIVE=ON)
    local skip=()
    [[ "${NATIVE:-1}" == 0 ]] && engine=() && skip=(KOKORO_NATIVE=0)
    (cd "$1" && env "${skip[@]}" python3 -m pip install --no-build-isolation --no-deps -q --target "$2" \
        "${engine[@]}" .) || {
        rm -rf "$2"
        echo "ab_bench: building $1 failed" >&2
        exit 1
    }
}

case "${1:-}" in
prepare)
    rev="${2:-}"
    [[ -n "$rev" ]] || usage
    git -C "$R" rev-parse --verify -q "$rev^{commit}" > /dev/null || {
        echo "ab_bench: '$rev' is not a revision of this repository" >&2
        exit 2
    }
    mkdir -p "$R/.ab"
    git -C "$R" diff --binary "$rev" -- "${SOURCES[@]}" > "$PATCH"
    echo "ab_bench: $(grep -c '^diff --git' "$PATCH") files differ from $rev; carry .ab with the call"
    ;;
run)
    rounds="${2:-2}"
    [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || usage
    bench="${BENCH:-bench}"
    [[ "$bench" == bench || "$bench" == traffic ]] || {
        echo "ab_bench: BENCH is bench or traffic, not '$bench'" >&2
        exit 2
    }
    [[ -f "$PATCH" ]] || {
        echo "ab_bench: no $PATCH; run 'scripts/ab_bench.sh prepare REV' first and carry .ab" >&2
        exit 2
    }
    work="${AB_WORK:-$(mktemp -d)}"
    mkdir -p "$work"
    if [[ ! -d "$work/site_a" ]]; then
        rm -rf "$work/a" && mkdir "$work/a"
        (cd "$R" && cp -r "${SOURCES[@]}" "$work/a/")
        if [[ -s "$PATCH" ]]; then
            (cd "$work/a" && git apply -R "$PATCH") || {
                echo "ab_bench: the patch does not reverse on this tree; prepare it again" >&2
                exit 1
            }
        fi
        build "$work/a" "$work/site_a"
    fi
    [[ -d "$work/site_b" ]] || build "$R" "$work/site_b"
    read -r -a bench_args <<< "${BENCH_ARGS:---cases medium,batch --precision fast --no-torch --repeats 20}"
    read -r -a traffic_args <<< "${TRAFFIC_ARGS:---rounds 3 --first-seen 80 --arrival-seconds 4}"
    # From outside the tree, so that the source package does not shadow the builds.
    cd "$work"
    if [[ -n "${TESTS:-}" ]]; then
        read -r -a tests <<< "$TESTS"
        on_side b python3 -m pytest -q "${tests[@]/#/$R/}" || echo "ab_bench: tests failed on B" >&2
    fi
    model="${MODEL:-}"
    if [[ "$bench" == traffic && -z "$model" ]]; then
        model="$work/random-model"
        [[ -d "$model" ]] || on_side a python3 -c \
            "import sys; from kokoro_gpu.random_weights import write_model_dir; write_model_dir(sys.argv[1])" \
            "$model" || exit 1
    fi
    capacity=()
    [[ -n "${OUT:-}" ]] && mkdir -p "$OUT"
    for ((round = 1; round <= rounds; ++round)); do
        for side in a b; do
            name="${side^^}$round"
            log="$work/$name.log"
            json="$work/$name.json"
            if [[ "$bench" == traffic ]]; then
                command=("$R/scripts/bench_traffic.py" --model "$model"
                         --phonemes-file "$R/tests/data/traffic_phonemes.json" "${traffic_args[@]}"
                         "${capacity[@]}" --json "$json")
            else
                command=("$R/scripts/bench.py" "${bench_args[@]}" --json "$json")
            fi
            if on_side "$side" python3 "${command[@]}" > "$log" 2>&1; then
                if [[ "$bench" == traffic ]]; then
                    sed "s/^/$name /" "$log"
                    if [[ ${#capacity[@]} -eq 0 ]]; then
                        capacity=(--capacity "$(python3 -c "import json, sys
forms = json.load(open(sys.argv[1]))['forms']
print(forms[0]['figures']['mixed_audio_s_per_s'])" "$json")")
                    fi
                else
                    grep -E "^kokoro_gpu" "$log" | sed "s/^/$name /"
                fi
                [[ -n "${OUT:-}" ]] && cp "$json" "$OUT/ab_$name.json"
            else
                echo "ab_bench: ${command[0]##*/} failed on $name; the end of its output:" >&2
                tail -n 20 "$log" >&2
            fi
        done
    done
    if [[ -n "${PROFILE:-}" ]]; then
        pyspy="${PYSPY:-$(command -v py-spy)}"
        [[ -x "$pyspy" ]] || {
            echo "ab_bench: PROFILE needs py-spy on the PATH or in PYSPY" >&2
            exit 1
        }
        read -r -a profile_args <<< "${PROFILE_ARGS:---seconds 5}"
        for side in a b; do
            profile="${OUT:-$work}/profile_${side^^}.txt"
            if on_side "$side" "$pyspy" record --native \
                --rate 250 --format raw -o "$profile" -- \
                python3 "$R/scripts/host_profile.py" run "${profile_args[@]}" \
                > "$work/profile_$side.log" 2>&1; then
                grep -v -e "^py-spy>" -e "^$" "$work/profile_$side.log" | sed "s/^/${side^^} /"
                python3 "$R/scripts/host_profile.py" summary "$profile" --top 25 | sed "s/^/${side^^} /"
            else
                echo "ab_bench: the profile of ${side^^} failed; the end of its output:" >&2
                tail -n 20 "$work/profile_$side.log" >&2
            fi
        done
    fi
    ;;
*)
    usage
    ;;
esac
