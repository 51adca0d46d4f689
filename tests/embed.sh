# tests/embed.sh — netc --emit=lib: a C program embeds digits_cnn through
# the API it writes and trains an epoch that ends with the very weights the
# program netc builds from the same model trains (--no-shuffle); the copy it
# loads predicts the same; bad calls fail with a message.  Every model's
# library compiles without a warning, its header in C++ too.
# NETC_TRAIN_DEVICE=cuda: the copy on a GPU must run (tests/emu_suite.sh:
# on the emulated one).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

CC=${NETC_CC:-cc}
RT="-I$SRC/runtime"
LIBS="$BUILD/runtime/libnetrt.a -fopenmp -lm"

check "'$NETC' --emit=lib --no-cuda '$SRC/models/digits_cnn.net' -o '$WORK/digits'" "--emit=lib failed"
check "[ -s '$WORK/digits.h' ] && [ -s '$WORK/digits.c' ] && [ ! -e '$WORK/digits.cu' ]" \
    "--emit=lib --no-cuda: not digits.h and digits.c alone"
# shellcheck disable=SC2086
$CC -std=c11 -O2 -Wall -Wextra -Werror $RT -I"$WORK" "$SRC/tests/embed/train_digits.c" \
    "$WORK/digits.c" $LIBS -o "$WORK/train_digits" 2> "$WORK/cc.err"
check "[ $? -eq 0 ]" "the embedding program does not build: $(head -5 "$WORK/cc.err")"
"$WORK/train_digits" "$SRC/data/optdigits.tra" "$SRC/data/optdigits.tes" "$WORK/lib.safetensors" \
    > "$WORK/out" 2> "$WORK/err"
check "[ $? -eq 0 ] && grep -q '^ok$' '$WORK/out'" "train_digits: $(cat "$WORK/err")"
acc=$(sed -n 's/^accuracy //p' "$WORK/out")
grep -E "^(no GPU|cuda)" "$WORK/out" | sed "s/^/embed.sh: /"
check "awk 'BEGIN { exit !(\"$acc\" + 0 >= 60) }'" "train_digits: test accuracy '$acc' after an epoch"

# the program from the same model, one epoch in file order: the same weights
NETC_CUDA=no "$NETC" "$SRC/models/digits_cnn.net" -o "$WORK/digits_prog"
(cd "$SRC" && "$WORK/digits_prog" --device cpu --no-shuffle --epochs 1 --quiet \
    --save "$WORK/prog.safetensors")
check "cmp -s '$WORK/lib.safetensors' '$WORK/prog.safetensors'" \
    "an epoch of digits_train_step and an epoch of the program end with different weights"

# a model that says precision bf16: the library trains in it too (the
# cpu's bf16), the very weights of its program
mkdir -p "$WORK/bf16"
sed 's/^}/    precision bf16\n}/' "$SRC/models/digits_cnn.net" > "$WORK/bf16/digits_cnn.net"
"$NETC" --emit=lib --no-cuda "$WORK/bf16/digits_cnn.net" -o "$WORK/bf16/digits"
# shellcheck disable=SC2086
$CC -std=c11 -O2 -Wall -Wextra -Werror $RT -I"$WORK/bf16" "$SRC/tests/embed/train_digits.c" \
    "$WORK/bf16/digits.c" $LIBS -o "$WORK/bf16/train_digits" 2> "$WORK/cc.err"
check "[ $? -eq 0 ]" "the bf16 embedding program does not build: $(head -5 "$WORK/cc.err")"
"$WORK/bf16/train_digits" "$SRC/data/optdigits.tra" "$SRC/data/optdigits.tes" \
    "$WORK/bf16/lib.safetensors" > "$WORK/out" 2> "$WORK/err"
check "[ $? -eq 0 ] && grep -q '^ok$' '$WORK/out'" "train_digits in bf16: $(cat "$WORK/err")"
NETC_CUDA=no "$NETC" "$WORK/bf16/digits_cnn.net" -o "$WORK/bf16/prog"
(cd "$SRC" && "$WORK/bf16/prog" --device cpu --no-shuffle --epochs 1 --quiet \
    --save "$WORK/bf16/prog.safetensors")
check "cmp -s '$WORK/bf16/lib.safetensors' '$WORK/bf16/prog.safetensors'" \
    "bf16: an epoch of digits_train_step and an epoch of the program end with different weights"
check "! cmp -s '$WORK/bf16/lib.safetensors' '$WORK/lib.safetensors'" \
    "bf16: the library's epoch ends with fp32's weights"

# every model's library compiles cleanly; its header is C++ too
CXX=${CXX:-c++}
for model in "$SRC"/models/*.net; do
    name=$(basename "$model" .net)
    "$NETC" --emit=lib --no-cuda "$model" -o "$WORK/$name"
    # shellcheck disable=SC2086
    check "$CC -std=c11 -Wall -Wextra -Werror $RT -c '$WORK/$name.c' -o '$WORK/$name.o'" \
        "$name: the library's C does not compile cleanly"
    if command -v "$CXX" > /dev/null 2>&1; then
        printf '#include "%s.h"\n' "$name" > "$WORK/$name.cc"
        check "$CXX -fsyntax-only -Wall -Wextra $RT -I'$WORK' '$WORK/$name.cc'" "$name: the header is not C++"
    fi
done
# a value model's train step takes y
check "grep -q 'int boston_mlp_train_step(boston_mlp \*m, const float \*x, const float \*y, int n' '$WORK/boston_mlp.h'" \
    "boston_mlp.h: train_step does not take y"
# a name that is not an identifier still gives one
"$NETC" --emit=lib --no-cuda "$SRC/models/digits_mlp.net" -o "$WORK/2-layer net"
check "grep -q '^m2_layer_net \*m2_layer_net_create' '$WORK/2-layer net.h'" "-o '2-layer net': the API's prefix"

# with CUDA, the library is still two files, compiled by the C compiler
# alone (its kernels' source is in it, for NVRTC at run time); two such
# libraries link into one program; it trains on the cpu (train_digits asks
# for it), the very weights of the cpu library, and where there is a GPU a
# third instance predicts on it, within 1e-4 of the cpu.  The runtime and
# the CUDA libraries are those netc links programs with (NETC_LIB_DIR and
# NETC_CUDA_LIBS, which tests/emu/env.sh sets; by default the build's).
DEV=${NETC_TRAIN_DEVICE:-cpu}
if [ "${NETC_HAVE_CUDA:-no}" = yes ]; then
    cuda_rt=${NETC_LIB_DIR:-$BUILD/runtime}/libnetrt_cuda.a
    cuda_libs=${NETC_CUDA_LIBS:-$NETRT_CUDA_LIBS}
    mkdir -p "$WORK/cu"
    check "NETC_CUDA=yes '$NETC' --emit=lib '$SRC/models/digits_cnn.net' -o '$WORK/cu/digits'" \
        "--emit=lib with CUDA failed"
    check "[ -s '$WORK/cu/digits.h' ] && [ -s '$WORK/cu/digits.c' ] && [ ! -e '$WORK/cu/digits.cu' ]" \
        "--emit=lib with CUDA: not digits.h and digits.c alone"
    NETC_CUDA=yes "$NETC" --emit=lib "$SRC/models/digits_mlp.net" -o "$WORK/cu/cu_mlp"
    { cat "$SRC/tests/embed/train_digits.c"
      printf '#include "cu_mlp.h"\nvoid other(void);\nvoid other(void) { cu_mlp_destroy(cu_mlp_create("cpu", 1, NULL)); }\n'
    } > "$WORK/cu/train.c"
    # shellcheck disable=SC2086
    $CC -std=c11 -O2 -Wall -Wextra -Werror $RT -I"$SRC/runtime/cuda" $NETRT_CUDA_CFLAGS -I"$WORK/cu" \
        "$WORK/cu/train.c" "$WORK/cu/digits.c" "$WORK/cu/cu_mlp.c" "$cuda_rt" \
        $LIBS $cuda_libs -o "$WORK/cu_train" 2> "$WORK/cucc.err"
    check "[ $? -eq 0 ]" "the CUDA libraries do not build with cc: $(head -5 "$WORK/cucc.err")"
    "$WORK/cu_train" "$SRC/data/optdigits.tra" "$SRC/data/optdigits.tes" "$WORK/culib.safetensors" \
        > "$WORK/cuout" 2> "$WORK/cuerr"
    check "[ $? -eq 0 ] && grep -q '^ok$' '$WORK/cuout'" "cu_train: $(cat "$WORK/cuerr")"
    grep -E "^(no GPU|cuda)" "$WORK/cuout" | sed "s/^/embed.sh: the CUDA library: /"
    [ "$DEV" = cpu ] ||
        check "grep -q '^cuda.*: within .* of the cpu' '$WORK/cuout'" "NETC_TRAIN_DEVICE=$DEV: no copy ran on a GPU"
    check "cmp -s '$WORK/lib.safetensors' '$WORK/culib.safetensors'" \
        "the CUDA library on the cpu ends with other weights than the cpu library"
elif [ "$DEV" != cpu ]; then
    check false "NETC_TRAIN_DEVICE=$DEV, but netc was configured without CUDA"
fi
finish
