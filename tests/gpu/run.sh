#!/bin/bash
# tests/gpu/run.sh — everything that needs a GPU, in one script: build netc
# with CUDA, run the kernel tests (tests/gpu/test_cuda_kernels.cu), the
# parity of every model with the cpu backend (tests/gpu/parity.sh, with the
# training set resident and, once, kept on the host), the JIT (programs
# built with --jit against the same ones built ahead of time: the cache's
# miss and hit, the same losses), compute-sanitizer on two models, bf16
# against fp32, and the benchmark against PyTorch (bench/gpu/run.sh).  It
# writes a report with every log: bench/results/DATE-GPU.md, and a copy
# under $OUT when that is set (the device tool brings $OUT back).
#
# usage: tests/gpu/run.sh [STAGE...]
#   stages: build kernels parity jit sanitizer ranks precision bench (default: all, in
#   order; ranks: tests/gpu/ranks.sh, data parallel on 2 ranks, where netc
#   was built with MPI).
#   Stages after build reuse its tree, so a long run can be split into
#   calls: `run.sh build kernels parity`, then `run.sh sanitizer bench`;
#   each call appends to the day's report.
#
# Without a GPU it runs what a cpu can of each stage — the build, the
# kernel test's compilation, parity.sh with DEVICE=cpu, bench/gpu/run.sh with
# DEVICE=cpu — and says so in the report: a check of the scripts, not of
# the GPU.
#
# On a lent machine (2026-11-28, an H200 of 16 cores, its image without
# autotools' outputs or stb_image): carry a `make dist` tarball, unpack and
# run it with COMMIT set; the stages took build 11 s, kernels 79-86 s,
# parity 189 s, jit 47 s, precision 48 s, sanitizer 86 s, so give parity a
# call of its own.  Carry libstb-dev's /usr/include/stb and libstb.so.0 and
# copy them into place there (ldconfig; libstb.so a link to it), or
# images.sh and cnn101 are skipped.  bench/gpu/run.sh's torch.compile
# variants compile for minutes on a fresh machine: give the bench a call of
# its own, with MODELS and VARIANTS cut to what fits.  Set PYTHON to the
# image's python3 (the one with torch; /usr/bin/python3 has none there).
# What fitted 15 minutes of device time (2026-12-04, an H200, each start
# about 40 s): `run.sh build`, then `run.sh kernels jit sanitizer` in the
# background beside `run.sh parity` (they append to one report), then
# `run.sh precision`: 334 s in one call; a second call of `run.sh build
# precision bench` with MODELS="boston_mlp digits_cnn cnn101 cifar10",
# VARIANTS="eager graph" and REPEAT=2: 426 s.
#
# Environment: PYTHON (with torch; default /usr/bin/python3), JOBS (make
# -j; default: the number of cores), CUDA_ARCH (default sm_90), BUILD (the
# build tree; default: the source tree itself), COMMIT (the commit named in
# the report, where the tree is not a git checkout: a `make dist` tarball).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
PYTHON=${PYTHON:-/usr/bin/python3}
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN)}
CUDA_ARCH=${CUDA_ARCH:-sm_90}
BUILD=${BUILD:-$root}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

stages=${*:-build kernels parity jit sanitizer ranks precision bench}
day=$(date +%Y-%m-%d)
report=$root/bench/results/$day-GPU.md
mkdir -p "$root/bench/results"
logs=$(mktemp -d "${TMPDIR:-/tmp}/netc-gpu.XXXXXX")
trap 'rm -rf "$logs"' EXIT

if nvidia-smi -L >/dev/null 2>&1; then
    gpu=1
    device_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
        head -1)
else
    gpu=0
    device_line="no GPU: the cpu-side parts only"
fi

# section TITLE LOGFILE STATUS: appends a section with the log to the
# report, with the seconds since the stage began ($stage_start), and copies
# the report to $OUT (a call cut off at its limit still brings back what ran)
section() {
    {
        echo
        echo "## $1 — $3 ($(($(date +%s) - stage_start)) s)"
        echo
        echo '```'
        cat "$2"
        echo '```'
    } >>"$report"
    echo "== $1: $3"
    if [ -n "${OUT:-}" ]; then cp "$report" "$OUT/"; fi
}

if [ ! -f "$report" ]; then
    {
        echo "# GPU run of $day"
        echo
        echo "Written by tests/gpu/run.sh; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null ||
            echo 'unknown (not a git checkout; set COMMIT)')}."
        echo
        echo "Device: $device_line"
    } >"$report"
fi

stage_build() {
    local log=$logs/build.log
    {
        "$NVCC" --version | tail -2
        if [ $gpu = 1 ]; then nvidia-smi 2>&1 | head -15; fi
        [ -f "$root/configure" ] || autoreconf -fi
        mkdir -p "$BUILD"
        (cd "$BUILD" && "$root/configure" --with-cuda --with-cuda-arch="$CUDA_ARCH" -q &&
            make -j"$JOBS" >/dev/null) &&
            grep -E '^(NETRT_CUDA_GENCODE|NVCC) =' "$BUILD/Makefile"
    } >"$log" 2>&1
    local rc=$?
    section "Build (configure --with-cuda --with-cuda-arch=$CUDA_ARCH)" "$log" \
        "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")"
    return $rc
}

stage_kernels() {
    local log=$logs/kernels.log bin=$BUILD/tests/gpu/test_cuda_kernels
    {
        # shellcheck disable=SC2046
        "$NVCC" -std=c++17 -O3 -arch="$CUDA_ARCH" -Xcompiler -Wall,-Wextra \
            -I"$BUILD" -I"$root/runtime" -I"$root/runtime/cuda" -I"$root/templates" \
            "$root/tests/gpu/test_cuda_kernels.cu" "$BUILD/runtime/libnetrt_cuda.a" \
            "$BUILD/runtime/libnetrt.a" -ldl -lgomp -lm -o "$bin" && "$bin"
    } >"$log" 2>&1
    local rc=$?
    section "Kernels against the cpu runtime (tests/gpu/test_cuda_kernels.cu)" "$log" \
        "$(case $rc in 0) echo ok ;; 77) echo "skipped: no GPU" ;; *) echo "FAILED ($rc)" ;; esac)"
}

stage_parity() {
    local log=$logs/parity.log dev=cuda rc=0 job f
    [ $gpu = 1 ] || dev=cpu
    # independent jobs, at once (each in a scratch directory of its own), their logs one after the other
    mkdir -p "$logs/data"
    (
        . "$root/tests/gradcheck/data.sh"
        for f in "$root"/tests/gradcheck/*.net; do
            gradcheck_data "$(basename "$f" .net)" "$logs/data/$(basename "$f" .net).csv" 40
        done
    )
    parity_job() { # NAME COMMAND...: runs COMMAND in the background, its log $logs/job.NAME
        local name=$1
        shift
        ( "$@" >"$logs/job.$name" 2>&1; echo $? >"$logs/rc.$name" ) &
    }
    # The cpu's side of every comparison with the GPU (parity.sh's CPU_ENV)
    # sums its convolutions directly, as the GPU's implicit GEMMs do, not in
    # Winograd's form, whose rounding test_kernels and gradcheck.sh check:
    # the form's F(4x4, 3x3) gradients lie 2e-6 of the largest from the
    # direct sums', and digits_resnet, over 100 steps of Adam, parts
    # wherever its sums do (the cpu from weights moved by 1e-6: 2 % by step
    # 80; an H200, 2026-12-04: 3e-7 from the direct sums, 5.5 % from the
    # form's)
    local -x CPU_ENV=NETRT_CPU_CONV=direct
    # parity.sh's list: every model but resnet20 (parity.sh says why), its
    # own job below
    models=$("$root/tests/gpu/parity.sh" --list)
    # shellcheck disable=SC2086
    parity_job models env DEVICE=$dev NETC="$BUILD/netc" "$root/tests/gpu/parity.sh" $models
    # resnet20 as tests/pytorch_check.py checks it against PyTorch: at lr 1e-4
    # and batch 16 its 20 steps stay clear of the kinks
    parity_job resnet20 env DEVICE=$dev STEPS=20 BATCH=16 FLAGS="--lr 1e-4" NETC="$BUILD/netc" \
        "$root/tests/gpu/parity.sh" "$root/models/resnet20.net"
    # (their epochs end the run after 10 steps or more)
    parity_job gradcheck-models env DEVICE=$dev STEPS=10 NETC="$BUILD/netc" DATA_DIR="$logs/data" \
        "$root/tests/gpu/parity.sh" "$root"/tests/gradcheck/*.net
    # bf16: the same rounding points on both sides; the GPU's fp32 sums in
    # an order of their own now and then round to the other bf16 neighbour
    # (an H100, 30 steps: 2e-5 and below, but 4.3e-3 where batchnorm's
    # statistics feed every value of a batch).  10 steps: digits_resnet's
    # twenty batchnorms and adds carry such a rounding on, so that two right
    # bf16 runs part by 1 % after 15 or 20 steps (an H200 against the cpu:
    # 1.1 % by step 24; the cpu's two bf16 paths, NETRT_CPU_BF16=fp32 and
    # avx512bf16, 1.3 % at step 19, 0.27 % in the first 10).
    # shellcheck disable=SC2086
    parity_job bf16 env DEVICE=$dev PRECISION=bf16 STEPS=10 RTOL=1e-2 NETC="$BUILD/netc" \
        "$root/tests/gpu/parity.sh" $models
    # fp16 likewise, its scaler from a scale the first steps overflow
    # shellcheck disable=SC2086
    parity_job fp16 env DEVICE=$dev PRECISION=fp16 FLAGS="--loss-scale 1073741824" STEPS=30 \
        RTOL=1e-2 NETC="$BUILD/netc" "$root/tests/gpu/parity.sh" $models
    if [ $gpu = 1 ]; then
        # bf16 and fp16 keeping their values in 16 bits against the same runs
        # with 4 bytes (NETRT_ACT_BITS): bit for bit
        # shellcheck disable=SC2086
        parity_job act16-bf16 env DEVICE=cuda-act16 PRECISION=bf16 STEPS=20 NETC="$BUILD/netc" \
            "$root/tests/gpu/parity.sh" $models "$root/models/resnet20.net"
        # shellcheck disable=SC2086
        parity_job act16-fp16 env DEVICE=cuda-act16 PRECISION=fp16 STEPS=20 \
            FLAGS="--loss-scale 1073741824" NETC="$BUILD/netc" "$root/tests/gpu/parity.sh" $models
        # the training set kept on the host: batches staged through pinned buffers
        parity_job host-data env NETRT_CUDA_HOST_DATA=1 DEVICE=cuda NETC="$BUILD/netc" \
            "$root/tests/gpu/parity.sh" "$root/models/digits_mlp.net" "$root/models/cifar10.net"
        # validation, schedules, checkpoints and --resume (bit for bit),
        # SIGINT, TensorBoard, --eval and --predict on the GPU
        parity_job train.sh env NETC_TRAIN_DEVICE=cuda NETC="$BUILD/netc" NETC_TOP_SRCDIR="$root" \
            sh "$root/tests/train.sh"
        # image lists, the loader's flipped batches, resume with flips
        parity_job images.sh env NETC_TRAIN_DEVICE=cuda NETC="$BUILD/netc" NETC_TOP_SRCDIR="$root" \
            sh "$root/tests/images.sh"
        # every backward pass against finite differences and the cpu's gradients;
        # in bf16 and fp16 against its own backward pass in fp32
        parity_job gradcheck.sh env NETC_TRAIN_DEVICE=cuda NETC="$BUILD/netc" NETC_TOP_SRCDIR="$root" \
            sh "$root/tests/gradcheck.sh"
    fi
    wait
    : >"$log"
    for f in "$logs"/job.*; do
        job=${f##*/job.}
        echo "--- $job: exit $(cat "$logs/rc.$job")" >>"$log"
        cat "$f" >>"$log"
        [ "$(cat "$logs/rc.$job")" = 0 ] || rc=1
    done
    section "Parity with the cpu backend (tests/gpu/parity.sh, DEVICE=$dev; tests/train.sh, tests/images.sh and tests/gradcheck.sh on it)" \
        "$log" "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")"
}

stage_jit() {
    local log=$logs/jit.log rc=0 m k ran data
    export NETC_CACHE_DIR=$logs/cache
    : >"$log"
    # cifar10 trains on synthetic CIFAR records (its data is not bundled)
    "$PYTHON" "$root/bench/make_cifar.py" "$logs/c10.bin" --records 640 --classes 10 --seed 1 >>"$log" 2>&1 || rc=1
    for m in digits_cnn cifar10 boston_mlp; do
        "$BUILD/netc" "$root/models/$m.net" -o "$logs/$m.aot" >>"$log" 2>&1 || rc=1
        "$BUILD/netc" --jit "$root/models/$m.net" -o "$logs/$m.jit" >>"$log" 2>&1 || rc=1
        if [ $gpu = 0 ]; then
            echo "--- $m: --jit-arch $CUDA_ARCH (no GPU)" >>"$log"
            "$logs/$m.jit" --jit-arch "$CUDA_ARCH" >>"$log" 2>&1 || rc=1
            continue
        fi
        echo "--- $m: --jit-info, first (a miss) and second (a hit)" >>"$log"
        "$logs/$m.jit" --jit-info --device cuda >>"$log" 2>&1 || rc=1
        "$logs/$m.jit" --jit-info --device cuda >"$logs/hit" 2>&1 || rc=1
        cat "$logs/hit" >>"$log"
        grep -q '^cache: *hit' "$logs/hit" || { echo "FAILED: no hit" >>"$log"; rc=1; }
        echo "--- $m: 30 steps, ahead of time and JIT: the same weights" >>"$log"
        data=
        [ $m = cifar10 ] && data="--data $logs/c10.bin --test-data $logs/c10.bin"
        ran=0
        for k in aot jit; do
            # shellcheck disable=SC2086
            (cd "$root" && "$logs/$m.$k" --device cuda --max-steps 30 --no-shuffle --quiet $data \
                --save "$logs/$m.$k.safetensors") >>"$log" 2>&1 && ran=$((ran + 1))
        done
        if [ $ran -ne 2 ]; then
            echo "FAILED: a run failed" >>"$log"
            rc=1
        elif cmp -s "$logs/$m.aot.safetensors" "$logs/$m.jit.safetensors"; then
            echo "bit-identical weights" >>"$log"
        else
            echo "FAILED: the weights differ (nvcc and NVRTC compiled different code)" >>"$log"
            rc=1
        fi
    done
    unset NETC_CACHE_DIR
    section "JIT (--jit against ahead of time$([ $gpu = 0 ] && echo ", no GPU: --jit-arch"))" \
        "$log" "$([ $rc -eq 0 ] && echo ok || echo FAILED)"
}

stage_sanitizer() {
    local log=$logs/sanitizer.log rc=0 m
    if [ $gpu = 0 ] || ! command -v compute-sanitizer >/dev/null; then
        echo "no GPU or no compute-sanitizer" >"$log"
        section "compute-sanitizer" "$log" "skipped"
        return 0
    fi
    : >"$log"
    for m in digits_mlp digits_cnn; do
        "$BUILD/netc" "$root/models/$m.net" -o "$logs/$m" >>"$log" 2>&1 || rc=1
        for tool in memcheck initcheck racecheck synccheck; do
            echo "--- $m: compute-sanitizer --tool $tool, 30 steps" >>"$log"
            compute-sanitizer --tool "$tool" --error-exitcode 9 "$logs/$m" --device cuda \
                --max-steps 30 --quiet >>"$log" 2>&1 || rc=1
        done
    done
    section "compute-sanitizer (memcheck, initcheck, racecheck, synccheck)" "$log" \
        "$([ $rc -eq 0 ] && echo ok || echo FAILED)"
}

stage_ranks() {
    local log=$logs/ranks.log
    NETC=$BUILD/netc NETC_TOP_SRCDIR=$root NETC_HAVE_MPI=$(grep -q '^HAVE_MPI_WORD = yes' \
        "$BUILD/Makefile" && echo yes) PYTHON=$PYTHON sh "$root/tests/gpu/ranks.sh" >"$log" 2>&1
    local rc=$?
    section "Two ranks on the GPU (tests/gpu/ranks.sh: NCCL over the loopback)" "$log" \
        "$(case $rc in 0) echo ok ;; 77) echo skipped ;; *) echo "FAILED ($rc)" ;; esac)"
    [ $rc -eq 77 ] || return $rc
}

# bf16 against fp32 on the GPU: the training speed (samples/s, twice each)
# and the peak device memory of the same model, at the seed batch sizes
# (3000 steps) and at large ones, where the products outweigh the launches
# (300 steps: cifar10 at 1024, resnet20 at 256)
stage_precision() {
    local log=$logs/precision.log rc=0 run m b steps p data bflag
    if [ $gpu = 0 ]; then
        echo "no GPU" >"$log"
        section "bf16 against fp32" "$log" "skipped"
        return 0
    fi
    "$PYTHON" "$root/bench/make_cifar.py" "$logs/c10p.bin" --records 5000 --classes 10 --seed 1 >"$log" 2>&1 || rc=1
    for run in digits_cnn:0:3000 cifar10:0:3000 cnn101:0:3000 cifar10:1024:300 resnet20:256:300; do
        IFS=: read -r m b steps <<<"$run"
        [ -x "$logs/$m.p" ] || "$BUILD/netc" "$root/models/$m.net" -o "$logs/$m.p" >>"$log" 2>&1 || rc=1
        data= bflag=
        case $m in cifar10 | resnet20) data="--data $logs/c10p.bin --test-data $logs/c10p.bin" ;; esac
        [ "$b" = 0 ] || bflag="--batch $b"
        for p in fp32 bf16 fp32 bf16; do
            echo "--- $m ${bflag:-(its batch)} --precision $p" >>"$log"
            # shellcheck disable=SC2086
            (cd "$root" && "$logs/$m.p" --device cuda --precision $p --max-steps $steps --epochs 10000 \
                $bflag $data 2>&1 | grep -E '^(trained|peak)') >>"$log" || rc=1
        done
    done
    section "bf16 against fp32 (step time, peak memory)" "$log" \
        "$([ $rc -eq 0 ] && echo ok || echo FAILED)"
}

stage_bench() {
    local log=$logs/bench.log dev=cuda
    [ $gpu = 1 ] || dev=cpu
    DEVICE=$dev NETC=$BUILD/netc PYTHON=$PYTHON "$root/bench/gpu/run.sh" >"$log" 2>"$logs/bench.err"
    local rc=$?
    [ $rc -eq 0 ] || tail -20 "$logs/bench.err" >>"$log"
    section "Benchmark against PyTorch (bench/gpu/run.sh, DEVICE=$dev)" "$log" \
        "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")"
}

status=0
for s in $stages; do
    case $s in
    build | kernels | parity | jit | sanitizer | ranks | precision | bench)
        stage_start=$(date +%s)
        "stage_$s" || status=1
        ;;
    *) echo "run.sh: unknown stage $s (build kernels parity jit sanitizer ranks precision bench)" >&2; exit 2 ;;
    esac
    [ "$s" = build ] && [ $status -ne 0 ] && break
done
if [ -n "${OUT:-}" ]; then
    cp "$report" "$OUT/"
fi
echo "report: $report"
exit $status
