# tests/emu_train.sh — generated programs training on netc's emulated CUDA
# device (tests/emu/, built by tests/emu/env.sh), against the cpu backend:
# tests/gpu/parity.sh over every models/*.net (resnet20 aside) and every tests/gradcheck
# model, from the same --load weights, in file order and shuffled, each on
# a few dozen samples so that an epoch ends with a partial batch within the
# steps run; once with the kernels compiled ahead of time (nvcc.py), once
# with --jit (the emulated NVRTC, through the JIT cache).  Then the JIT
# cache's miss and hit (--jit-info) and a damaged entry, and a cuBLAS that
# cannot be used: auto trains on the cpu, --device cuda says why.
# Skipped (77) where tests/emu.sh is.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/emu/env.sh"
. "$SRC/tests/gradcheck/data.sh"

gradcheck_data_dir "$WORK/data" 40
cd "$SRC" || exit 1 # the models name their data from the source tree
# parity.sh's own list (not resnet20: it says why; tests/emu_suite.sh
# trains it on this device against PyTorch step by step)
models=$(sh "$SRC/tests/gpu/parity.sh" --list)
for jit in no yes; do
    # shellcheck disable=SC2086 # $models: a list of paths
    DEVICE=cuda STEPS=6 SAMPLES=75 BATCH=16 JIT=$jit DATA_DIR="$WORK/data" \
        sh "$SRC/tests/gpu/parity.sh" $models "$SRC"/tests/gradcheck/*.net \
        > "$WORK/parity.$jit" 2>&1
    check "[ $? -eq 0 ]" "parity with the cpu (--jit: $jit): $(grep -v '^ok' "$WORK/parity.$jit")"
    tail -n 1 "$WORK/parity.$jit"
done

# The JIT cache: a miss compiles and stores, a hit loads; a damaged entry
# is a miss again (and is replaced), never an error.
export NETC_CACHE_DIR="$WORK/cache2"
compile_jit() { "$NETC" --jit "$SRC/models/$1.net" -o "$WORK/$1.jit"; }
compile_jit digits_mlp
info() { "$WORK/digits_mlp.jit" --jit-info --device cuda > "$WORK/info" 2>&1; }
info
check "[ $? -eq 0 ] && grep -q '^cache: *miss' '$WORK/info'" "--jit-info, first: $(cat "$WORK/info")"
info
check "[ $? -eq 0 ] && grep -q '^cache: *hit' '$WORK/info'" "--jit-info, second: $(cat "$WORK/info")"
entry=$(sed -n 's/^cache entry: *//p' "$WORK/info")
check "[ -f '$entry' ]" "no cache entry: $(cat "$WORK/info")"
[ -f "$entry" ] && printf 'damage' | dd of="$entry" bs=1 seek=100 conv=notrunc 2> /dev/null
info
check "[ $? -eq 0 ] && grep -q '^cache: *miss' '$WORK/info'" "--jit-info, a damaged entry: $(cat "$WORK/info")"
"$WORK/digits_mlp.jit" --device cuda --max-steps 3 --quiet
check "[ $? -eq 0 ]" "training with the replaced entry"

# cuBLAS is loaded when a run first needs the GPU: one without cublasCreate
# (found first, through LD_LIBRARY_PATH) leaves the GPU unusable, not the program
mkdir -p "$WORK/badblas"
echo 'int not_cublas;' > "$WORK/badblas/empty.c"
${CC:-cc} -shared -fPIC -o "$WORK/badblas/libcublas.so.$cuda_major" "$WORK/badblas/empty.c"
compile "$SRC/models/boston_mlp.net" "$WORK/bm"
badblas() { LD_LIBRARY_PATH="$WORK/badblas:$LD_LIBRARY_PATH" "$WORK/bm" --max-steps 2 "$@"; }
badblas --device auto > "$WORK/auto.out" 2>&1
check "[ $? -eq 0 ] && grep -q '^device: cpu (auto: cuBLAS has no cublasCreate_v2' '$WORK/auto.out'" \
    "auto with an unusable cuBLAS: $(head -3 "$WORK/auto.out")"
badblas --device cuda > "$WORK/cuda.out" 2>&1
check "[ $? -eq 1 ] && [ \$(wc -l < '$WORK/cuda.out') -eq 1 ] && grep -q 'error: device cuda: cuBLAS has no cublasCreate_v2' '$WORK/cuda.out'" \
    "--device cuda with an unusable cuBLAS: $(cat "$WORK/cuda.out")"
"$WORK/bm" --device cuda --max-steps 2 --quiet
check "[ $? -eq 0 ]" "the same program with the emulated cuBLAS"
finish
