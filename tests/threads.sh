# tests/threads.sh — the cpu gives the same bits on one thread as on two:
# tests/gpu/parity.sh with DEVICE=cpu (--threads 1 against --threads 2,
# every step's loss equal) over every models/*.net and every
# tests/gradcheck model, in file order and shuffled, in fp32, bf16 and
# fp16, each on a few dozen samples and batches of 16 so that an epoch
# ends with a partial batch within the steps run (a batch of 11 once cut
# cifar10's first convolution into blocks that wrote past their columns
# on two threads).  The products are the machine's own: AVX-512 (cols
# read in place), AVX2, AVX512-BF16 or AMX, and oneDNN's convolutions
# where it is found.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/gradcheck/data.sh"

gradcheck_data_dir "$WORK/data" 40
cd "$SRC" || exit 1 # the models name their data from the source tree
for p in fp32 bf16 fp16; do
    DEVICE=cpu STEPS=10 SAMPLES=75 BATCH=16 PRECISION=$p DATA_DIR="$WORK/data" \
        sh "$SRC/tests/gpu/parity.sh" "$SRC"/models/*.net "$SRC"/tests/gradcheck/*.net \
        > "$WORK/threads.$p" 2>&1
    check "[ $? -eq 0 ]" "1 and 2 threads in $p: $(grep -v -e '^ok' -e '^skip' "$WORK/threads.$p")"
    tail -n 1 "$WORK/threads.$p"
done
finish
