#!/bin/sh
# tests/emu/mutate.sh — does a green run on the emulated device mean
# something?  Injects, one at a time into a copy of the source tree, each
# bug class the device is built to catch, and runs the emulated test that
# should catch it (tests/emu/mutant.sh): every mutant must fail, and the
# tree as it is pass.  A mutation whose text is no longer in its file is
# an error of this script, not a pass.
#
# usage, from the build tree: NETC=./netc NETC_TOP_SRCDIR=SRC sh tests/emu/mutate.sh [NAME...]
# (NAME: one of the mutants below; default all).  About a minute a mutant.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

# The mutants: NAME@KIND@FILE@TEXT@REPLACEMENT (\n: a newline; printf, not
# echo, passes it on), and what each breaks.
mutants='sync@kernels@templates/netrt_kernels.cuh@        __syncthreads();\n        const bool more = k0 + T::BK < kend;@        const bool more = k0 + T::BK < kend;
lda@kernels@runtime/cuda/launch.c@ldb, a, lda, &beta@lda, a, ldb, &beta
half@kernels@runtime/cuda/launch.c@block = {threads, 1, 1}@block = {threads / 2, 1, 1}
oob@kernels@templates/netrt_kernels.cuh@e < total;\n         e += (long long)gridDim.x@e <= total;\n         e += (long long)gridDim.x
nosync@train@runtime/cuda/backend.cu@sizeof(float), cudaMemcpyDeviceToHost, err) ||\n        NRT_CUDA(cudaStreamSynchronize(c->net.stream), err))\n        return -1;\n    *loss = c->host->loss;@sizeof(float), cudaMemcpyDeviceToHost, err))\n        return -1;\n    *loss = c->host->loss;
hostread@train@runtime/cuda/backend.cu@        setup_blas(c, err) || alloc_net(c, err))\n        return -1;@        setup_blas(c, err) || alloc_net(c, err))\n        return -1;\n    (void)*(volatile float *)net->param;
bwd@gradients@templates/netrt_kernels.cuh@(dy[at] - mdy - (x[at] - mean)@(dy[at] - (x[at] - mean)
nofork@ranks@runtime/cuda/backend.cu@ ||\n        NRT_CUDA(cudaStreamWaitEvent(b->stream, b->fork, 0), err))@)
nojoin@ranks@runtime/cuda/backend.cu@ ||\n                   NRT_CUDA(cudaStreamWaitEvent(c->net.stream, b->join, 0), err)@
early@ranks@runtime/cuda/backend.cu@(join_buckets(c, err) || nrt_cuda_copy_loss(s, net->grad + np, &sc->loss, err))@(nrt_cuda_copy_loss(s, net->grad + np, &sc->loss, err) || join_buckets(c, err))
fp32@train@runtime/cuda/backend.cu@    net->lowp = cfg->precision;@    net->lowp = 0;
noskip@train@runtime/cuda/backend.cu@fp16 ? &sc->found : NULL, err)@NULL, err)
rounding@kernels@templates/netrt_kernels.cuh@nrt_lowp(prec, scale ? src[i] * s : src[i]);@nrt_lowp(prec, (scale ? src[i] * s : src[i]) * (1.0f + 0x1p-22f));
scaled@gradients@templates/netrt_kernels.cuh@nrt_lowp(prec, scale ? src[i] * s : src[i]);@nrt_lowp(prec, scale ? src[i] * s * s : src[i]);
unscale@gradients@runtime/cuda/backend.cu@        nrt_unscale(&c->host->scaler, grad, c->m->param_count);\n@
halftype@kernels@runtime/cuda/launch.c@NRT_BF16 ? CUDA_R_16BF : CUDA_R_16F;@NRT_BF16 ? CUDA_R_16BF : CUDA_R_16BF;
mmafrag@kernels@templates/netrt_kernels.cuh@[k + 8 * (lane / 16)]);@[k + 8 * (1 - lane / 16)]);
mmab@kernels@templates/netrt_kernels.cuh@fb[r + 1][0] = f[2], fb[r + 1][1] = f[3];@fb[r + 1][0] = f[3], fb[r + 1][1] = f[2];
dswizzle@kernels@templates/netrt_kernels.cuh@&D[row][MT::dcol(row, T::col(tx, 4 * gr))]@&D[row][T::col(tx, 4 * gr)]
whalf@kernels@templates/netrt_kernels.cuh@        if (bits)@        if (bits && i == 0)'
# what each is, for the report
what() {
    case $1 in
    sync) echo "a missing __syncthreads in the tiled GEMM's loop" ;;
    lda) echo "lda and ldb swapped in the cublasSgemm call" ;;
    half) echo "every kernel launched with half its threads" ;;
    oob) echo "a kernel writing one element past its output" ;;
    nosync) echo "the loss read without waiting for its copy" ;;
    hostread) echo "host code reading a device pointer" ;;
    bwd) echo "a backward kernel's formula wrong (batchnorm's dx without the mean of dy)" ;;
    nofork) echo "a bucket of gradients summed without waiting for backward to make it" ;;
    nojoin) echo "the optimizer not waiting for the gradients' sums" ;;
    early) echo "the summed loss read back before the sums are done" ;;
    fp32) echo "a bf16 run on the GPU computing in fp32 (lowp never set)" ;;
    noskip) echo "fp16 on the GPU updating the weights with overflowed gradients" ;;
    rounding) echo "the GPU's bf16 rounding biased upward, now and then a bf16 ulp off" ;;
    scaled) echo "fp16's loss gradient scaled twice on the GPU" ;;
    unscale) echo "fp16's gradients left scaled by --gradcheck on the GPU" ;;
    halftype) echo "fp16's products read by the tensor cores as bf16 (cublasGemmEx's type)" ;;
    mmafrag) echo "a convolution's mma fragments of A loaded with their k halves swapped (ldmatrix's row addresses)" ;;
    mmab) echo "a convolution's mma fragments of B given to the wrong halves of k" ;;
    dswizzle) echo "a convolution's accumulators read back from shared memory without the swizzle they were stored with" ;;
    whalf) echo "the weights' 16-bit copy left stale past its first value by their cast" ;;
    esac
}

copy_tree() { # DIR: the parts of the source tree the emulated tests read
    mkdir -p "$1"
    for d in runtime templates tests models data bench; do cp -R "$SRC/$d" "$1/"; done
}
run_kind() { # TREE KIND: mutant.sh's exit status
    NETC_TOP_SRCDIR=$1 sh "$1/tests/emu/mutant.sh" "$2" > "$WORK/run.out" 2>&1
}

names=${*:-$(printf '%s\n' "$mutants" | cut -d@ -f1)}
unrun=
for kind in kernels train gradients ranks; do
    echo "$names" | tr ' ' '\n' | while read -r n; do
        printf '%s\n' "$mutants" | grep -q "^$n@$kind@" && echo x
    done | grep -q x || continue
    copy_tree "$WORK/clean"
    run_kind "$WORK/clean" $kind
    st=$?
    if [ $st -eq 77 ] && [ $kind = ranks ]; then # no MPI here: the others still run
        echo "SKIP: the ranks mutants: $(tail -1 "$WORK/run.out")"
        unrun="$unrun ranks"
        continue
    fi
    [ $st -eq 77 ] && skip "the emulated device cannot run here: $(tail -1 "$WORK/run.out")"
    check "[ $st -eq 0 ]" "the tree as it is fails the $kind tests: $(grep FAIL "$WORK/run.out" | head -3)"
    rm -rf "$WORK/clean"
done
for n in $names; do
    line=$(printf '%s\n' "$mutants" | grep "^$n@")
    [ -n "$line" ] || { echo "mutate.sh: no mutant $n" >&2; exit 2; }
    kind=$(printf '%s\n' "$line" | cut -d@ -f2)
    case " $unrun " in *" $kind "*) continue ;; esac
    file=$(printf '%s\n' "$line" | cut -d@ -f3)
    copy_tree "$WORK/$n"
    "$PYTHON" - "$WORK/$n/$file" "$(printf '%s\n' "$line" | cut -d@ -f4)" "$(printf '%s\n' "$line" | cut -d@ -f5-)" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
text = open(path).read()
if text.count(old) != 1:
    sys.exit("the text to mutate is %s in %s" % ("not" if not text.count(old) else "more than once", path))
open(path, "w").write(text.replace(old, new))
PY
    applied=$?
    check "[ $applied -eq 0 ]" "mutant $n does not apply: update tests/emu/mutate.sh"
    [ $applied -eq 0 ] || continue
    run_kind "$WORK/$n" "$kind"
    st=$?
    caught=$(grep '^FAIL' "$WORK/run.out" | head -1 | cut -c1-160)
    check "[ $st -eq 1 ]" "mutant $n ($(what "$n")) was not caught by the $kind tests (exit $st)"
    [ $st -eq 1 ] && echo "caught $n ($(what "$n")): $caught"
    rm -rf "${WORK:?}/$n"
done
finish
