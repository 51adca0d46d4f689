# tests/gradcheck.sh — every layer's and loss's generated backward pass
# against central finite differences.
#
# Each model in tests/gradcheck/ is compiled and run with --gradcheck on a
# few random samples: every gradient of every parameter (up to 64 values a
# tensor) and of the input is compared with (L(p+h) - L(p-h)) / 2h, h = 1e-3,
# in float32, passing when |analytic - numeric| <= 2e-4 + 5e-3 max(|a|, |n|)
# (tight enough that a 10 % error in tanh's derivative fails).
# Where the loss has a kink inside [p-h, p+h] (relu at 0, a maxpool tie),
# the one-sided differences disagree and the analytic gradient must equal
# one of them (an rnn's relu too).  relu_kink and maxpool_ties put inputs on the kinks on purpose.
# NETC_TRAIN_DEVICE=cuda checks the GPU's backward passes so (tests/emu_train.sh
# runs it on the emulated device, tests/gpu/run.sh on a real one), and
# every gradient of them, of the parameters and the input, against the
# cpu's within 1e-5 of the tensor's largest.  Every layer netc knows must be
# in a model here, and every activation both fused and as a pass of its own.
# Each model (boston_mlp too) is checked in bf16 and fp16 as well: fp32's
# passes against finite differences on the cpu, the low-precision loss
# against fp32's within 4 u of what rounding the weights and the input moves
# it by, and the low-precision gradients against the same backward pass in
# fp32 over the same forward pass within 8 u of the largest (u = 2^-8 in
# bf16, 2^-11 in fp16; runtime/gradcheck.c says why).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
DEV=${NETC_TRAIN_DEVICE:-cpu}

. "$SRC/tests/gradcheck/data.sh"

# check_lowp NAME PROG ARGS...: PROG's --gradcheck in bf16 and in fp16 (the
# latter's output left in $lout)
check_lowp() {
    _name=$1 _prog=$2
    shift 2
    for prec in bf16 fp16; do
        lout=$("$_prog" "$@" --device "$DEV" --precision $prec 2>&1)
        status=$?
        echo "$lout" | grep -v '^kink' | sed "s/^/  $_name $prec: /"
        check "[ $status -eq 0 ]" "$_name: gradcheck in $prec failed"
        check "echo \"\$lout\" | grep -q '^gradcheck on cpu in fp32: .*: ok$'" \
            "$_name: no ok verdict of the fp32 passes in a $prec run"
        check "echo \"\$lout\" | grep -q \"^gradcheck: $prec's loss on $DEV.*: ok$\"" \
            "$_name: no ok verdict of the $prec loss on $DEV"
        check "echo \"\$lout\" | grep -q \"^gradcheck: $prec's gradients on $DEV.*: ok$\"" \
            "$_name: no ok verdict of the $prec gradients on $DEV"
    done
}

run_check() { # MODEL: its gradients on its data (tests/gradcheck/data.sh)
    model=$1.net data=$WORK/$1.csv
    gradcheck_data "$1" "$data"
    prog=$WORK/$1
    compile "$SRC/tests/gradcheck/$model" "$prog" || return
    out=$(NETRT_GRADCHECK_VERBOSE=1 "$prog" --data "$data" --gradcheck 4 --seed 3 --device "$DEV" 2>&1)
    status=$?
    echo "$out" | grep -v '^kink' | sed "s/^/  $model: /"
    check "[ $status -eq 0 ]" "$model: gradcheck failed"
    check "echo \"\$out\" | grep -q '^gradcheck on $DEV.*: ok$'" "$model: no gradcheck verdict on $DEV"
    [ "$DEV" = cpu ] ||
        check "echo \"\$out\" | grep -q \"^gradcheck: $DEV.*against the cpu's.*: ok$\"" \
            "$model: no verdict of the gradients against the cpu's"
    check_lowp "$model" "$prog" --data "$data" --gradcheck 4 --seed 3
}

# Every layer netc knows is in a model here, so that its backward passes
# (and, on a GPU, its kernels) are checked: a new layer without one fails.
printf 'model m {\n    input x[1]\n    target value(1)\n    no_such_layer\n    loss mse\n    optimizer sgd\n}\n' \
    > "$WORK/layers.net"
layers=$("$NETC" --check "$WORK/layers.net" 2>&1 | sed -n 's/.*note: layers: //p' | tr -d ,)
check "[ -n \"\$layers\" ]" "netc did not list its layers"
for l in $layers; do
    check "grep -q -E '^[[:space:]]*[a-z0-9_]*[[:space:]]*=?[[:space:]]*$l([[:space:](]|\$)' \"\$SRC\"/tests/gradcheck/*.net" \
        "layer $l is in no model of tests/gradcheck"
done

# and an activation fused into a layer's epilogue somewhere here is also
# checked as a pass of its own (their kernels differ on a GPU)
for f in "$SRC"/tests/gradcheck/*.net; do "$NETC" --emit=ir "$f"; done > "$WORK/ir"
unfused=$(awk '/^  %[0-9]+ .* = / { sub(/.* = /, ""); sub(/[( ].*/, ""); op = $0; next }
    op != "" { if (/in its epilogue/) fused[op] = 1; else alone[op] = 1; op = "" }
    END { for (o in fused) if (!(o in alone)) print o }' "$WORK/ir")
check "[ -s '$WORK/ir' ] && [ -z '$unfused' ]" "never a pass of its own in tests/gradcheck: $unfused"

for f in "$SRC"/tests/gradcheck/*.net; do
    case $f in */relu_kink.net | */maxpool_ties.net) continue ;; esac # below
    run_check "$(basename "$f" .net)"
done

# relu at exactly 0 (half the inputs are).  PyTorch defines relu'(0) = 0,
# the left derivative, and so must netc: every kink reports analytic == left.
run_check relu_kink
kinks=$(echo "$out" | grep -c '^kink input' || true)
check "[ $kinks -gt 0 ]" "relu_kink: no kink was exercised"
bad=$(echo "$out" | awk '/^kink input/ { a = $4; l = $6; sub(",", "", a); sub(",", "", l); if (a + 0 != l + 0) print }')
check "[ -z \"\$bad\" ]" "relu_kink: relu'(0) is not 0 (PyTorch's convention): $bad"

# maxpool ties: each 2x2 window holds equal values.  The first element in
# scan order takes the whole gradient (right derivative), the others none.
run_check maxpool_ties
kinks=$(echo "$out" | grep -c '^kink input' || true)
check "[ $kinks -gt 0 ]" "maxpool_ties: no tie was exercised"

# a large loss (boston_mlp's MSE of house prices, in the hundreds at the
# start): float rounding bounds what finite differences resolve, which
# the verdict allows for and says, rather than fail a right gradient
compile "$SRC/models/boston_mlp.net" "$WORK/boston"
out=$(cd "$SRC" && "$WORK/boston" --gradcheck 3 --device "$DEV" 2>&1)
check "[ $? -eq 0 ] && echo \"\$out\" | grep -q 'is a float: its differences resolve derivatives to'" \
    "boston_mlp's gradients with a large loss: $(echo "$out" | grep -v '^kink' | head -5)"
# and in bf16 and fp16, whose gradients overflow at the first loss scale:
# checked at the first of its halvings where they fit
cd "$SRC" || exit 1 # the model names its data from the source tree
check_lowp boston_mlp "$WORK/boston" --gradcheck 3
check "echo \"\$lout\" | grep -q '^gradcheck: fp16.s gradients overflow at the loss scale 65536: checked at '" \
    "boston_mlp in fp16: no word of its gradients' overflow at the first loss scale"
finish
