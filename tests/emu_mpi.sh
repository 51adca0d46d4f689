# tests/emu_mpi.sh — data-parallel training on GPUs: mpirun -np 2 of a
# program built with netc --mpi for netc's emulated device, each rank on
# an emulated GPU of its own (its local rank's), the gradients summed by
# the emulated NCCL across the two processes inside the step's CUDA graph:
#  - 2 ranks at batch 16 give the step losses of one process on one GPU at
#    32 (within 1e-6 relative over 30 steps; boston_mlp and a digits CNN),
#    across epoch ends and partial last batches, and the test loss too;
#    the CNN again with its gradients summed in four buckets that overlap
#    backward (--bucket-mb);
#  - a last batch of one sample (one rank with none);
#  - two ranks and one GPU: --device cuda says which rank has none, auto
#    trains every rank on the cpu; two ranks and no GPU: said so;
#  - an NCCL that cannot be used: --device cuda says why, auto trains every
#    rank on the cpu.
# Skipped (77) where tests/emu.sh is, or without MPI, mpirun or nccl.h.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
mpi_setup 300
. "$SRC/tests/emu/env.sh"
[ -e "$EMU_LIB/libnccl.so.2" ] || skip "no nccl.h: the emulated NCCL was not built"
export NETC_EMU_DEVICES=2 NETC_EMU_NCCL_TIMEOUT=60

cd "$SRC" || exit 1 # the models name their data from the source tree
sed 's/adam(lr=1e-3)/sgd(lr=0.05, momentum=0.9)/' models/digits_cnn.net > "$WORK/cnn.net"
for m in mlp cnn; do
    src=models/boston_mlp.net
    [ $m = cnn ] && src=$WORK/cnn.net
    "$NETC" --mpi "$src" -o "$WORK/$m" || { echo "FAIL: netc --mpi $src" >&2; failures=$((failures + 1)); }
done

for m in mlp cnn; do
    two_ranks $m "$WORK/$m" cuda 30
    check "grep -q '^world: 2 ranks on 1 host (MPI), a GPU each (rank 0.s: cuda:0 .*; gradients summed in 1 bucket as backward runs$' '$WORK/$m.out'" \
        "$m: the world line: $(grep world "$WORK/$m.out")"
done

# the gradients in buckets of 1 KiB at most after the first: the CNN's
# (10 + 640, 64 + 8192, 32 + 4608, 16 + 144 floats) summed in four, each
# as soon as backward has made it, on a stream of its own; the graph's
# branches replayed in a random order their dependencies allow, so that
# a missing fork or join gives other losses
two_ranks buckets "$WORK/cnn" cuda 30 --bucket-mb 0.001
check "grep -q '; gradients summed in 4 buckets as backward runs$' '$WORK/buckets.out'" \
    "the CNN in buckets of 1 KiB: $(grep world "$WORK/buckets.out")"

# a last batch of one sample (405 = 2 x 202 + 1): rank 0 adds zeros
last_of_one "$WORK/mlp" cuda 2

# two ranks, one GPU
NETC_EMU_DEVICES=1 run 2 "$WORK/mlp" --device cuda --max-steps 2 > "$WORK/one.out" 2>&1
check "[ $? -ne 0 ] && grep -q 'error: device cuda: rank 1 has no GPU of its own' '$WORK/one.out'" \
    "two ranks, one GPU, --device cuda: $(grep error "$WORK/one.out")"
NETC_EMU_DEVICES=1 run 2 "$WORK/mlp" --device auto --max-steps 2 > "$WORK/auto.out" 2>&1
check "[ $? -eq 0 ] && grep -q '^device: cpu (auto: rank 1 has no GPU of its own: every rank on the cpu)' '$WORK/auto.out'" \
    "two ranks, one GPU, auto: $(head -3 "$WORK/auto.out")"

# no GPU at all (none visible): said so, not "no GPU of their own"
CUDA_VISIBLE_DEVICES= run 2 "$WORK/mlp" --device cuda --max-steps 2 > "$WORK/none.out" 2>&1
check "[ $? -ne 0 ] && grep -q 'error: device cuda: ranks 0, 1 see no CUDA device$' '$WORK/none.out'" \
    "two ranks, no GPU, --device cuda: $(grep error "$WORK/none.out")"

# an NCCL that cannot be used (found first, through LD_LIBRARY_PATH):
# --device cuda says so; auto trains every rank on the cpu
mkdir -p "$WORK/badnccl"
echo 'int not_nccl;' > "$WORK/badnccl/empty.c"
${CC:-cc} -shared -fPIC -o "$WORK/badnccl/libnccl.so.2" "$WORK/badnccl/empty.c"
for dev in cuda auto; do
    LD_LIBRARY_PATH="$WORK/badnccl:$LD_LIBRARY_PATH" run 2 "$WORK/mlp" --device $dev --max-steps 2 \
        > "$WORK/bad.$dev" 2>&1
    echo $? > "$WORK/bad.$dev.rc"
done
check "[ \$(cat '$WORK/bad.cuda.rc') -ne 0 ] && grep -q 'error: device cuda: NCCL has no ncclGetUniqueId' '$WORK/bad.cuda'" \
    "an unusable NCCL, --device cuda: $(grep error "$WORK/bad.cuda" | head -2)"
check "[ \$(cat '$WORK/bad.auto.rc') -eq 0 ] && grep -q '^device: cpu (auto: NCCL has no ncclGetUniqueId' '$WORK/bad.auto'" \
    "an unusable NCCL, auto: $(head -3 "$WORK/bad.auto")"
finish
