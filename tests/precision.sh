# tests/precision.sh — fp16's loss scaling in whole runs, by
# torch.cuda.amp.GradScaler's rules (its defaults: a first scale of 65536,
# halved on a step whose gradients hold an inf or a NaN, which is skipped;
# doubled after 2000 steps without one):
#  - a skipped step leaves the weights exactly as they were, and the
#    metrics say the scale and the steps skipped;
#  - a first scale far too large (2^30: the scaled gradients overflow
#    fp16) is halved step by step until they fit, and the run then trains
#    to within a few percent of one started at the default;
#  - 2000 steps without an overflow double the scale;
#  - a run stopped and resumed keeps the scaler's state: the same weights,
#    bit for bit, as one never stopped;
#  - bf16's products on AMX, on AVX512-BF16 and in fp32 arithmetic end a
#    run in the same place, and the run says which it used;
#  - digits_mlp reaches in fp16 and in bf16 the test accuracy of fp32
#    within a point;
#  - a run that keeps its values in 16 bits (NETRT_ACT_BITS=16, the
#    second memory plan: forward_half, backward_half) is the same run,
#    bit for bit, as one keeping them in 32, over the models that read a
#    value by name (the third working copy), branch, add, multiply,
#    concatenate, normalise, recur and pad (a convolution's padded input,
#    made in backward's x working copy); where auto keeps them in 16 bits
#    (digits_resnet) and where not (digits_mlp), and the run says so.
# (PyTorch 1.13's cpu autocast has no fp16, so there is no step-by-step
# comparison with PyTorch here; bf16's is in tests/pytorch.sh, and fp16
# rounds at bf16's points: tests/unit/test_kernels.c checks its rounding
# against the compiler's _Float16 and GradScaler's rules one by one, and
# tests/emu_train.sh the GPU's scaler against the cpu's.)
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
cd "$SRC" || exit 1 # the model names its data from the source tree
compile "$SRC/models/digits_mlp.net" "$WORK/dm" || finish
run() { "$WORK/dm" --quiet --threads 1 "$@"; }

# a skipped step changes nothing but the scale
run --max-steps 0 --save "$WORK/w0.safetensors"
run --precision fp16 --loss-scale 1e30 --max-steps 3 --save "$WORK/w3.safetensors" \
    --metrics "$WORK/skip.jsonl" --log-every 1
check "cmp -s '$WORK/w0.safetensors' '$WORK/w3.safetensors'" \
    "three skipped steps changed the weights"
check "[ \"\$(field '$WORK/skip.jsonl' skipped_steps)\" = 3 ] && close \"\$(field '$WORK/skip.jsonl' loss_scale)\" 1.25e29 1e-6" \
    "after three overflows from 1e30: $(tail -1 "$WORK/skip.jsonl")"

# recovery from a scale far too large
run --precision fp16 --loss-scale 1073741824 --epochs 3 --metrics "$WORK/big.jsonl" --log-every 1
run --precision fp16 --epochs 3 --metrics "$WORK/default.jsonl"
skipped=$(field "$WORK/big.jsonl" skipped_steps)
check "[ -n '$skipped' ] && [ '$skipped' -ge 10 ] && [ '$skipped' -le 20 ]" \
    "from 2^30: $skipped steps skipped (expected the 10 to 20 halvings to a scale that fits)"
check "[ \"\$(sed -n '1s/.*\"loss_scale\": \([^,]*\),.*/\1/p' '$WORK/big.jsonl')\" = 536870912 ]" \
    "the first overflow halves 2^30: $(head -1 "$WORK/big.jsonl")"
check "close \"\$(field '$WORK/default.jsonl' test_loss)\" \"\$(field '$WORK/big.jsonl' test_loss)\" 0.05" \
    "from 2^30 the run ends elsewhere: test loss $(field "$WORK/big.jsonl" test_loss) against $(field "$WORK/default.jsonl" test_loss)"

# growth after 2000 clean steps
run --precision fp16 --loss-scale 1024 --max-steps 2001 --epochs 100 --metrics "$WORK/grow.jsonl" \
    --log-every 1
check "[ \"\$(sed -n 's/^{\"step\": 1999, .*\"loss_scale\": \([^,]*\),.*/\1/p' '$WORK/grow.jsonl')\" = 1024 ] && [ \"\$(sed -n 's/^{\"step\": 2000, .*\"loss_scale\": \([^,]*\),.*/\1/p' '$WORK/grow.jsonl')\" = 2048 ] && [ \"\$(field '$WORK/grow.jsonl' skipped_steps)\" = 0 ]" \
    "2000 clean steps from 1024: $(sed -n '1999,2001p' "$WORK/grow.jsonl")"

# stopped while the scale is still coming down, and resumed
run --precision fp16 --loss-scale 1073741824 --max-steps 30 --save "$WORK/full.safetensors" \
    --metrics "$WORK/full.jsonl"
run --precision fp16 --loss-scale 1073741824 --max-steps 6 --checkpoint "$WORK/ck"
run --resume "$WORK/ck" --max-steps 30 --save "$WORK/cut.safetensors" --metrics "$WORK/cut.jsonl"
check "cmp -s '$WORK/full.safetensors' '$WORK/cut.safetensors'" \
    "fp16 stopped at step 6 (scale still halving) and resumed: other weights"
check "[ \"\$(field '$WORK/full.jsonl' loss_scale)\" = \"\$(field '$WORK/cut.jsonl' loss_scale)\" ] && [ \"\$(field '$WORK/full.jsonl' skipped_steps)\" = \"\$(field '$WORK/cut.jsonl' skipped_steps)\" ]" \
    "resumed: another scaler ($(tail -1 "$WORK/cut.jsonl"))"
"$WORK/dm" --resume "$WORK/ck" --loss-scale 8 > "$WORK/rs.out" 2>&1
check "[ $? -ne 0 ] && grep -q 'loss-scale starts a run; --resume goes on with its checkpoint' '$WORK/rs.out'" \
    "--resume with --loss-scale: $(cat "$WORK/rs.out")"

# bf16's products on the cpu: AMX's tiles (NETRT_CPU_BF16=amx) or
# AVX512-BF16's pairs (avx512bf16), each where the cpu has it, else the
# next, or fp32 multiply-adds of the same bf16 values (fp32): the same
# exact products summed in other orders, so the same run to within the
# roundings that order moves; and the run says which it used
pairs="fp32 multiply-adds"
grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null &&
    pairs="bf16 pairs on AVX512-BF16 (vdpbf16ps), summed in fp32"
tiles=$pairs
grep -q amx_bf16 /proc/cpuinfo 2>/dev/null && tiles="bf16 tiles on AMX (tdpbf16ps), summed in fp32"
for how in amx avx512bf16 fp32; do
    NETRT_CPU_BF16=$how "$WORK/dm" --threads 1 --precision bf16 --epochs 2 \
        --metrics "$WORK/$how.jsonl" --log-every 1 > "$WORK/$how.out" 2>&1
done
check "grep -q 'precision bf16: products as $tiles' '$WORK/amx.out' && grep -q 'precision bf16: products as $pairs' '$WORK/avx512bf16.out' && grep -q 'precision bf16: products as fp32 multiply-adds (.*) of the rounded values' '$WORK/fp32.out'" \
    "bf16's products not as NETRT_CPU_BF16 asks: $(grep precision "$WORK/amx.out" "$WORK/avx512bf16.out" "$WORK/fp32.out")"
for how in amx avx512bf16; do
    check "close \"\$(field '$WORK/$how.jsonl' train_loss)\" \"\$(field '$WORK/fp32.jsonl' train_loss)\" 0.01 && close \"\$(field '$WORK/$how.jsonl' test_accuracy)\" \"\$(field '$WORK/fp32.jsonl' test_accuracy)\" 0.01" \
        "bf16 with NETRT_CPU_BF16=$how and fp32 apart: $(tail -1 "$WORK/$how.jsonl") against $(tail -1 "$WORK/fp32.jsonl")"
done
NETRT_CPU_BF16=fast "$WORK/dm" --precision bf16 --max-steps 1 > "$WORK/env.out" 2>&1
check "[ $? -ne 0 ] && grep -q \"NETRT_CPU_BF16 is 'fast': auto, amx, avx512bf16 or fp32\" '$WORK/env.out'" \
    "NETRT_CPU_BF16=fast: $(cat "$WORK/env.out")"

# values kept in 16 bits: the same bits as in 32 (every model and
# tests/gradcheck model passed this in bf16 and fp16 when it came; these
# are the ones whose glue differs most: named operands, branches, the rnn)
NETRT_ACT_BITS=16 "$WORK/dm" --precision bf16 --max-steps 1 > "$WORK/bits16.out" 2>&1
"$WORK/dm" --precision bf16 --max-steps 1 > "$WORK/auto.out" 2>&1
check "grep -q 'precision bf16: products as .*; values kept in 16 bits$' '$WORK/bits16.out' && ! grep -q 'values kept' '$WORK/auto.out'"     "NETRT_ACT_BITS=16, then auto (digits_mlp: 16 bits would take more): $(grep precision "$WORK/bits16.out" "$WORK/auto.out")"
NETRT_ACT_BITS=8 "$WORK/dm" --precision bf16 --max-steps 1 > "$WORK/bits8.out" 2>&1
check "[ $? -ne 0 ] && grep -q \"NETRT_ACT_BITS is '8': auto, 16 or 32\" '$WORK/bits8.out'" \
    "NETRT_ACT_BITS=8: $(cat "$WORK/bits8.out")"
compile "$SRC/models/digits_resnet.net" "$WORK/dr" || finish
"$WORK/dr" --precision fp16 --max-steps 1 > "$WORK/dr.out" 2>&1
check "grep -q 'values kept in 16 bits' '$WORK/dr.out'" \
    "digits_resnet in fp16 with NETRT_ACT_BITS=auto: $(grep precision "$WORK/dr.out")"
. "$SRC/tests/gradcheck/data.sh"
for m in residual branches input_operands mixed_layouts concat mul rnn_tanh batchnorm2d conv_stride_pad winograd; do
    gradcheck_data "$m" "$WORK/$m.csv" 40
done
g=$SRC/tests/gradcheck
for prec in bf16 fp16; do
    models="$SRC/models/digits_resnet.net $g/mul.net $g/concat.net"
    [ $prec = bf16 ] && models="$models $g/residual.net $g/branches.net $g/input_operands.net $g/mixed_layouts.net $g/rnn_tanh.net $g/batchnorm2d.net $g/conv_stride_pad.net $g/winograd.net"
    # shellcheck disable=SC2086
    DEVICE=cpu-act16 STEPS=8 SAMPLES=75 BATCH=16 PRECISION=$prec DATA_DIR="$WORK" \
        sh "$SRC/tests/gpu/parity.sh" $models > "$WORK/act16.$prec" 2>&1
    check "[ $? -eq 0 ]" "values kept in 16 bits against 32 in $prec: $(grep -v '^ok' "$WORK/act16.$prec")"
    tail -n 1 "$WORK/act16.$prec"
done

# the three precisions end in the same place
for prec in fp32 bf16 fp16; do
    run --precision $prec --epochs 5 --metrics "$WORK/$prec.jsonl"
done
acc32=$(field "$WORK/fp32.jsonl" test_accuracy)
for prec in bf16 fp16; do
    acc=$(field "$WORK/$prec.jsonl" test_accuracy)
    check "close '$acc32' '$acc' 0.01" "digits_mlp in $prec: test accuracy $acc, fp32's $acc32"
done
finish
