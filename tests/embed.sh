# tests/embed.sh — netc --emit=lib: a C program embeds digits_cnn through
# the API it writes and trains an epoch that ends with the very weights the
# program netc builds from the same model trains (--no-shuffle); the copy it
# loads predicts the same; bad calls fail with a message.  Every model's
# library compiles without a warning, its header in C++ too.
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
check "awk 'BEGIN { exit !(\"$acc\" + 0 >= 60) }'" "train_digits: test accuracy '$acc' after an epoch"

# the program from the same model, one epoch in file order: the same weights
NETC_CUDA=no "$NETC" "$SRC/models/digits_cnn.net" -o "$WORK/digits_prog"
(cd "$SRC" && "$WORK/digits_prog" --device cpu --no-shuffle --epochs 1 --quiet \
    --save "$WORK/prog.safetensors")
check "cmp -s '$WORK/lib.safetensors' '$WORK/prog.safetensors'" \
    "an epoch of digits_train_step and an epoch of the program end with different weights"

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

# with CUDA, the library's .cu names its descriptor after the library, so
# two models link into one program
if [ "${NETC_HAVE_CUDA:-no}" = yes ]; then
    NETC_CUDA=yes "$NETC" --emit=lib "$SRC/models/digits_mlp.net" -o "$WORK/cu_mlp"
    check "grep -q 'const nrt_cuda_model cu_mlp_cuda_model' '$WORK/cu_mlp.cu'" "cu_mlp.cu: the descriptor's name"
    # shellcheck disable=SC2086
    check "$NVCC -std=c++17 --extended-lambda $NETRT_CUDA_GENCODE -I'$SRC/runtime' -I'$SRC/runtime/cuda' -c '$WORK/cu_mlp.cu' -o '$WORK/cu_mlp.cu.o'" \
        "cu_mlp.cu does not compile"
fi
finish
