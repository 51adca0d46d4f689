# tests/cuda.sh — the CUDA backend where no GPU is needed: every model under
# models/ (and the gradient-check models) emits CUDA that nvcc compiles
# for the configured architectures without a warning (tests/emit.sh checks
# it is reproducible); a program built with the backend links, lists devices, and
# without a GPU falls back to the cpu under --device auto and refuses
# --device cuda with one clear sentence.  Skipped (77) when netc was
# configured without CUDA.  The GPU checks themselves are tests/gpu/run.sh.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

[ "${NETC_HAVE_CUDA:-no}" = yes ] || skip "netc was configured without CUDA"
unset NETC_CUDA
NVCC=${NVCC:-nvcc}

for model in "$SRC"/models/*.net "$SRC"/tests/gradcheck/*.net; do
    name=$(basename "$model" .net)
    check "'$NETC' --emit=cuda '$model' -o '$WORK/$name.cu'" "$name: --emit=cuda failed"
    # shellcheck disable=SC2086
    "$NVCC" -std=c++17 -O3 --extended-lambda $NETRT_CUDA_GENCODE -Xcompiler -Wall,-Wextra \
        -I"$SRC/runtime" -I"$SRC/runtime/cuda" -c "$WORK/$name.cu" -o "$WORK/$name.o" \
        > "$WORK/$name.log" 2>&1
    check "[ $? -eq 0 ]" "$name: nvcc failed on the emitted CUDA: $(head -20 "$WORK/$name.log")"
    check "! grep -qi 'warning' '$WORK/$name.log'" "$name: nvcc warns: $(grep -i -m3 warning "$WORK/$name.log")"
done

# One whole program with the backend, on a machine with or without a GPU.
model=$SRC/models/boston_mlp.net
check "compile '$model' '$WORK/prog'" "boston_mlp: netc -o with CUDA failed"
if [ -x "$WORK/prog" ]; then
    "$WORK/prog" --list-devices > "$WORK/devices.out" 2>&1
    check "[ $? -eq 0 ] && [ -s '$WORK/devices.out' ]" "--list-devices failed: $(cat "$WORK/devices.out")"
    if grep -q '^no CUDA device' "$WORK/devices.out"; then
        # from the source tree: the model names its data relative to it
        (cd "$SRC" && "$WORK/prog" --device cuda --max-steps 1) > "$WORK/cuda.out" 2> "$WORK/cuda.err"
        check "[ $? -eq 1 ]" "--device cuda without a GPU: exit status not 1"
        check "grep -q 'no CUDA device found' '$WORK/cuda.err'" \
            "--device cuda without a GPU: $(cat "$WORK/cuda.err")"
        check "[ \$(wc -l < '$WORK/cuda.err') -eq 1 ]" "--device cuda without a GPU: more than one line"
        check "(cd '$SRC' && '$WORK/prog' --device auto --epochs 1) > '$WORK/auto.out'" \
            "--device auto without a GPU failed"
        check "grep -q '^device: cpu (auto: no CUDA device)' '$WORK/auto.out'" \
            "--device auto does not say it uses the cpu: $(head -2 "$WORK/auto.out")"
    fi
fi
finish
