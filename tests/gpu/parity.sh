#!/bin/bash
# tests/gpu/parity.sh — the GPU backend against the cpu backend, model by
# model: from the same initial weights (--load), 100 steps on each device,
# every step's loss logged (--log-every 1); the losses must agree within
# 1e-4 relative at every step.  Twice per model: in file order
# (--no-shuffle), and shuffled — both backends compute the same epoch order
# and the same dropout masks (runtime/philox.h), so shuffling and dropout
# keep parity too.
#
# usage: NETC=./netc tests/gpu/parity.sh [MODEL...]     (default: the --list)
#        tests/gpu/parity.sh --list: the default models, one path a line:
#        models/*.net but resnet20.  Its gradients jump where a relu's input
#        is within rounding of 0 (twenty batchnorms over batches of 16 noise
#        images, at lr 0.1), and two devices' sums put a few such values on
#        either side, so that its runs part by 1e-3 by step 5 (bf16's: 2 %
#        by step 4), as PyTorch's own does from weights moved by 1e-7: it is
#        compared at lr 1e-4 and batch 16 (tests/gpu/run.sh), and against
#        PyTorch step by step (tests/pytorch_check.py, tests/emu_suite.sh).
#   DEVICE   the device compared with the cpu (default: cuda).  DEVICE=cpu
#            compares the cpu at 1 thread with the cpu at 2 threads, which
#            must agree bit for bit: the check a machine without a GPU can
#            make of this script and of the cpu side.  DEVICE=cpu-avx2
#            compares the cpu with itself under NETRT_CPU_ISA=avx2 (its
#            products on AVX2, not AVX-512), bit for bit too.  DEVICE=cpu-baseline
#            compares the program with itself built with -DNRT_PASS=: its
#            generated passes in their x86-64 baseline (SSE2) clone, not the
#            AVX2 one the cpu picks (netrt.h), bit for bit too.  DEVICE=cpu-act16
#            compares the cpu keeping a bf16 or fp16 run's values in 16 bits
#            (NETRT_ACT_BITS=16) with it keeping them in 32 (=32), bit for bit
#            too (with PRECISION bf16 or fp16; in fp32 both runs are the same);
#            DEVICE=cuda-act16 the same on the GPU.  DEVICE=cpu-reorder compares
#            the program with itself built with NETC_REORDER=no: its layers
#            as written, no relu run after the max pool that follows it
#            (compiler/reorder.c), bit for bit too.
#   STEPS    steps per run (default: 100)
#   RTOL     the tolerance (default: 1e-4)
#   KEEP     a directory to keep the logs in (default: none)
#   SAMPLES  train, validate and test on the first SAMPLES samples of each
#            source the model names (copies; synthetic CIFAR records), so
#            that an epoch ends, with a partial batch, within a few steps
#            (default: all of them)
#   BATCH    the batch size of every model (default: each model's own)
#   DATA_DIR a directory of training sets, NAME.csv for model NAME, used
#            instead of the one the model names (models without one: the
#            tests/gradcheck models)
#   JIT      yes: the program is built with --jit, its kernels compiled
#            by NVRTC when it runs (default: no, by nvcc ahead of time)
#   PRECISION  --precision of both runs (default: the model's); a model
#            that cannot train in it is skipped
#   FLAGS    more flags for both runs (--loss-scale S)
#   CPU_ENV  environment of the cpu's run where DEVICE is a GPU, such as
#            NETRT_CPU_CONV=direct: the cpu's convolutions as direct sums,
#            not Winograd's form (tests/gpu/run.sh sets it, and says why)
#   RUN_LIMIT  seconds a program may run before it is stopped and its run
#            counted as failed (default: 600): no run hangs the script
#
# Prints one line per model and run, ends with "parity: N passed, N failed";
# exits 0 if all passed, 1 if not, 77 if DEVICE is cuda and there is none.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" = --list ]; then
    ls "$root"/models/*.net | grep -v '/resnet20\.net$'
    exit 0
fi
NETC=${NETC:-$root/netc}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-100}
RTOL=${RTOL:-1e-4}
PYTHON=${PYTHON:-python3}
bound="timeout -k 10 ${RUN_LIMIT:-600}"

work=$(mktemp -d "${TMPDIR:-/tmp}/netc-parity.XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -x "$NETC" ] || { echo "parity.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }

if [ $# -eq 0 ]; then
    # shellcheck disable=SC2046 # paths without spaces
    set -- $(ls "$root"/models/*.net | grep -v '/resnet20\.net$')
fi

# Synthetic CIFAR-format data for the models whose data is not bundled.
"$PYTHON" "$root/bench/make_cifar.py" "$work/c10.bin" --records "${SAMPLES:-640}" --classes 10 \
    --seed 1
# small_source KIND PATH OUT: the first $SAMPLES samples of a source, in OUT
small_source() {
    case $2 in /*) path=$2 ;; *) path=$root/$2 ;; esac
    case $1 in
    csv | table)
        if grep -q 'header *= *1' "$model"; then
            head -n $((SAMPLES + 1)) "$path"
        else
            head -n "$SAMPLES" "$path"
        fi > "$3"
        ;;
    images) # a list: its header kept, its relative paths made absolute
        awk -F, -v OFS=, -v n="$SAMPLES" -v dir="$(dirname "$path")" '
            NR == 1 && $2 !~ /^[0-9]+$/ { print; next }
            kept < n { if ($1 !~ /^\//) $1 = dir "/" $1; print; kept++ }' "$path" > "$3"
        ;;
    *) return 1 ;;
    esac
}
# data_flags NAME: --data, --valid-data, --test-data for the model
data_flags() {
    # CIFAR-10 data (not bundled): the synthetic records
    if grep -q '^ *train  *cifar10(' "$model"; then
        echo --data "$work/c10.bin" --test-data "$work/c10.bin"
        return
    fi
    if [ -f "${DATA_DIR:-/nonexistent}/$1.csv" ]; then
        echo --data "$DATA_DIR/$1.csv"
        return
    fi
    [ -n "${SAMPLES:-}" ] || return 0
    for role in train valid test; do
        # the source's kind and path, as the model file names them
        src=$(sed -n "s/^ *$role  *\([a-z0-9]*\)(\"\([^\"]*\)\".*/\1 \2/p" "$model")
        [ -n "$src" ] || continue
        # shellcheck disable=SC2086
        small_source $src "$work/$1.$role.small" || continue
        case $role in
        train) echo --data "$work/$1.$role.small" ;;
        *) echo "--$role-data" "$work/$1.$role.small" ;;
        esac
    done
}

a_env= b_env= b_cflags= b_netc_env=
if [ "$DEVICE" = cpu ]; then
    a_flags="--device cpu --threads 1"
    b_flags="--device cpu --threads 2"
    rtol=0 # threads never change a result
elif [ "$DEVICE" = cpu-avx2 ]; then
    a_flags="--device cpu"
    b_flags="--device cpu"
    b_env=NETRT_CPU_ISA=avx2
    rtol=0 # nor the instruction set the built-in kernels run on
elif [ "$DEVICE" = cpu-act16 ]; then
    a_flags="--device cpu"
    b_flags="--device cpu"
    a_env=NETRT_ACT_BITS=32
    b_env=NETRT_ACT_BITS=16
    rtol=0 # a value rounded to 16 bits keeps them exactly
elif [ "$DEVICE" = cuda-act16 ]; then
    a_flags="--device cuda"
    b_flags="--device cuda"
    a_env=NETRT_ACT_BITS=32
    b_env=NETRT_ACT_BITS=16
    rtol=0
elif [ "$DEVICE" = cpu-reorder ]; then
    a_flags="--device cpu"
    b_flags="--device cpu"
    b_netc_env=NETC_REORDER=no
    rtol=0 # nor the order of a relu and its max pool
elif [ "$DEVICE" = cpu-baseline ]; then
    a_flags="--device cpu"
    b_flags="--device cpu"
    b_cflags="${NETC_CFLAGS:--O3 -fno-math-errno} -DNRT_PASS="
    rtol=0 # nor the clone of the generated passes
else
    a_flags="--device cpu"
    a_env=${CPU_ENV:-}
    b_flags="--device $DEVICE"
    rtol=$RTOL
fi

# netc ARGS... as it builds the second program: with b_cflags or b_netc_env
netc_b() {
    if [ -n "$b_cflags" ]; then
        NETC_CFLAGS=$b_cflags "$NETC" "$@"
    else
        # shellcheck disable=SC2086
        env $b_netc_env "$NETC" "$@"
    fi
}

passed=0
failed=0
first=1
for model in "$@"; do
    name=$(basename "$model" .net)
    prog=$work/$name
    # shellcheck disable=SC2046
    if ! "$NETC" $([ "${JIT:-no}" = yes ] && echo --jit) "$model" -o "$prog" \
        > "$work/$name.netc.log" 2>&1; then
        echo "FAIL $name: netc: $(head -5 "$work/$name.netc.log")"
        failed=$((failed + 1))
        continue
    fi
    a_prog=$prog b_prog=$prog
    if [ -n "$b_cflags$b_netc_env" ]; then
        b_prog=$prog.b
        if ! netc_b "$model" -o "$b_prog" > "$work/$name.netc.b.log" 2>&1; then
            echo "FAIL $name: netc with ${b_cflags:+NETC_CFLAGS=$b_cflags }$b_netc_env: $(head -5 "$work/$name.netc.b.log")"
            failed=$((failed + 1))
            continue
        fi
    fi
    if [ $first = 1 ] && [ "${DEVICE#cpu}" = "$DEVICE" ]; then
        first=0
        if $bound "$prog" --list-devices 2>&1 | grep -q '^no CUDA device'; then
            echo "parity.sh: no CUDA device: skipped"
            exit 77
        fi
    fi
    # shellcheck disable=SC2046
    if ! $bound "$prog" --device cpu --max-steps 0 --save "$work/$name.w0.safetensors" \
        $(data_flags "$name") > /dev/null 2> "$work/$name.w0.err"; then
        echo "FAIL $name: saving the initial weights: $(cat "$work/$name.w0.err")"
        failed=$((failed + 1))
        continue
    fi
    for order in --no-shuffle --shuffled; do
        flags="--load $work/$name.w0.safetensors --max-steps $STEPS --log-every 1 --quiet"
        [ -n "${BATCH:-}" ] && flags="$flags --batch $BATCH"
        [ -n "${PRECISION:-}" ] && flags="$flags --precision $PRECISION"
        [ -n "${FLAGS:-}" ] && flags="$flags $FLAGS"
        [ "$order" = --no-shuffle ] && flags="$flags --no-shuffle"
        ok=1
        for side in a b; do
            eval "dev=\$${side}_flags envs=\$${side}_env run=\$${side}_prog"
            # shellcheck disable=SC2086,SC2154
            if ! $bound env $envs "$run" $dev $flags $(data_flags "$name") \
                --metrics "$work/$name$order.$side.jsonl" > "$work/$name$order.$side.out" 2>&1; then
                if grep -q 'built without stb_image' "$work/$name$order.$side.out"; then
                    ok=skip # image data, and a runtime configured without stb_image
                    why="the runtime was built without stb_image (libstb-dev)"
                    break
                fi
                if grep -q "error: precision ${PRECISION:-}: " "$work/$name$order.$side.out"; then
                    ok=skip # a layer without a path in that precision
                    why=$(sed -n "s/.*error: //p" "$work/$name$order.$side.out")
                    break
                fi
                echo "FAIL $name $order: $dev: $(tail -3 "$work/$name$order.$side.out")"
                ok=0
            fi
        done
        if [ $ok = skip ]; then
            echo "skip $name $order: $why"
            continue
        fi
        if [ $ok = 1 ] && "$PYTHON" - "$work/$name$order.a.jsonl" "$work/$name$order.b.jsonl" \
            "$rtol" "$STEPS" "$name $order" <<'EOF'; then
import json, sys
a_path, b_path, rtol, steps, what = sys.argv[1:]
rtol, steps = float(rtol), int(steps)
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if l.startswith('{"step"')]
a, b = losses(a_path), losses(b_path)
if len(a) != steps or len(b) != steps:
    print(f"FAIL {what}: {len(a)} and {len(b)} step losses, expected {steps}")
    sys.exit(1)
worst, at = 0.0, 0
for i, (x, y) in enumerate(zip(a, b)):
    d = abs(x - y) / max(abs(x), abs(y), 1e-30)
    if d > worst or d != d:
        worst, at = d, i
ok = worst <= rtol
print(f"{'ok  ' if ok else 'FAIL'} {what}: {steps} steps, largest relative difference "
      f"{worst:.3g} at step {at + 1} ({a[at]:.9g} vs {b[at]:.9g}); last loss {a[-1]:.6g}")
sys.exit(0 if ok else 1)
EOF
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
    done
done
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP" && cp "$work"/*.jsonl "$KEEP/" 2> /dev/null
fi
echo "parity: $passed passed, $failed failed"
[ $failed -eq 0 ]
