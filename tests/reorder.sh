#!/bin/sh
# tests/reorder.sh — a relu followed by a max pool runs after the pool
# (compiler/reorder.c), and that changes no bit: every model where netc
# moves one, built as is and with NETC_REORDER=no (its layers as written),
# through tests/gpu/parity.sh with DEVICE=cpu-reorder (every step's loss
# equal, from the same weights, in file order and shuffled) in fp32, bf16
# and fp16; and --check's summary the same either way, the model as
# written.  gradcheck.sh checks the moved passes' gradients (relu_pool.net:
# an overlapping, padded pool whose windows tie at 0 as written).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/gradcheck/data.sh"

moved=
for m in "$SRC"/models/*.net "$SRC"/tests/gradcheck/*.net; do
    "$NETC" --emit=c "$m" -o "$WORK/moved.c" 2> "$WORK/netc.err" ||
        { check false "netc --emit=c $m: $(head -3 "$WORK/netc.err")"; continue; }
    NETC_REORDER=no "$NETC" --emit=c "$m" -o "$WORK/kept.c" 2> "$WORK/netc.err"
    check "! grep -q 'run after layer' '$WORK/kept.c'" "NETC_REORDER=no still moves a layer of $m"
    "$NETC" --check "$m" > "$WORK/moved.check" 2>&1
    NETC_REORDER=no "$NETC" --check "$m" > "$WORK/kept.check" 2>&1
    check "cmp -s '$WORK/moved.check' '$WORK/kept.check'" \
        "$m: --check's summary is not the model as written: $(diff "$WORK/kept.check" "$WORK/moved.check" | head -5)"
    grep -q 'run after layer' "$WORK/moved.c" && moved="$moved $m"
done
for m in cnn101 digits_cnn digits_cnn_bn relu_pool conv_stride_pad; do
    case "$moved" in
    */$m.net*) ;;
    *) check false "$m: its relu not moved after its max pool" ;;
    esac
done
echo "moved: $(for m in $moved; do basename "$m" .net; done | tr '\n' ' ')"

gradcheck_data_dir "$WORK/data" 40
cd "$SRC" || exit 1 # the models name their data from the source tree
for p in fp32 bf16 fp16; do
    # shellcheck disable=SC2086
    DEVICE=cpu-reorder STEPS=10 SAMPLES=75 BATCH=16 PRECISION=$p DATA_DIR="$WORK/data" \
        sh "$SRC/tests/gpu/parity.sh" $moved > "$WORK/reorder.$p" 2>&1
    check "[ $? -eq 0 ]" "moved and as written in $p: $(grep -v -e '^ok' -e '^skip' "$WORK/reorder.$p")"
    tail -n 1 "$WORK/reorder.$p"
done
finish
