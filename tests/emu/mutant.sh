# tests/emu/mutant.sh KIND — one run of the emulated tests against the tree
# it is in (tests/emu/mutate.sh runs it in mutated copies):
#   kernels  test_cuda_kernels.cu, every runtime kernel against the cpu
#   train    boston_mlp and digits_mlp trained on the emulated device against
#            the cpu (tests/gpu/parity.sh, a few steps), in fp32, bf16 and
#            fp16 (its first steps skipped)
#   gradients  --gradcheck on the emulated device of tests/gradcheck's
#            batchnorm2d model (finite differences and the cpu's gradients;
#            in bf16 and fp16, the loss against fp32's and the gradients
#            against the backward pass in fp32)
#   ranks    a digits CNN on 2 ranks (mpirun), an emulated GPU each, its
#            gradients summed over NCCL in four buckets as backward runs,
#            against one process at twice the batch (tests/emu_mpi.sh's)
# Exits 0 when the tests pass, 1 when they fail, 77 where the emulated
# device cannot run.  NETC_TOP_SRCDIR names the tree; NETC the compiler.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/emu/env.sh"
export NETC_INCLUDE_DIR="$SRC/runtime" # the tree's headers in the programs netc builds

case ${1:-} in
kernels)
    emu_nvcc -std=c++17 -O2 -I"$SRC/runtime" -I"$SRC/runtime/cuda" -I"$SRC/templates" \
        "$SRC/tests/gpu/test_cuda_kernels.cu" "$NETC_LIB_DIR/libnetrt_cuda.a" \
        "$NETC_LIB_DIR/libnetrt.a" -lgomp -lm -o "$WORK/tck" > "$WORK/tck.log" 2>&1 &&
        "$WORK/tck" > "$WORK/tck.out" 2>&1
    check "[ $? -eq 0 ]" "test_cuda_kernels: $(cat "$WORK/tck.log" "$WORK/tck.out" | grep -v -e '^ok' -e '^device 0' | head -3)"
    ;;
train)
    cd "$SRC" || exit 1
    for precision in fp32 bf16 fp16; do
        # (fp16 from a scale its first steps overflow: they are skipped)
        DEVICE=cuda STEPS=4 SAMPLES=40 PRECISION=$precision RTOL=1e-6 \
            FLAGS="$([ $precision = fp16 ] && echo --loss-scale 1e12)" \
            sh "$SRC/tests/gpu/parity.sh" "$SRC/models/boston_mlp.net" \
            "$SRC/models/digits_mlp.net" > "$WORK/parity.out" 2>&1
        check "[ $? -eq 0 ]" "parity in $precision: $(grep -v '^ok' "$WORK/parity.out" | head -5)"
    done
    ;;
gradients)
    . "$SRC/tests/gradcheck/data.sh"
    gradcheck_data batchnorm2d "$WORK/bn.csv"
    compile "$SRC/tests/gradcheck/batchnorm2d.net" "$WORK/bn" || finish
    for precision in fp32 bf16 fp16; do
        "$WORK/bn" --data "$WORK/bn.csv" --gradcheck 4 --device cuda --precision $precision \
            > "$WORK/bn.out" 2>&1
        check "[ $? -eq 0 ]" \
            "gradcheck in $precision: $(grep -v -e '^kink' -e ': ok$' "$WORK/bn.out" | head -3)"
    done
    ;;
ranks)
    mpi_setup 300
    [ -e "$EMU_LIB/libnccl.so.2" ] || skip "no nccl.h: the emulated NCCL was not built"
    export NETC_EMU_DEVICES=2
    cd "$SRC" || exit 1
    "$NETC" --mpi models/digits_cnn.net -o "$WORK/cnn" &&
        two_ranks buckets "$WORK/cnn" cuda 12 --bucket-mb 0.001
    ;;
*)
    echo "usage: mutant.sh kernels|train|gradients|ranks" >&2
    exit 2
    ;;
esac
finish
