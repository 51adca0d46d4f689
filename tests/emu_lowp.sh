# tests/emu_lowp.sh — bf16 and fp16 training on netc's emulated CUDA device
# against the cpu (tests/gpu/parity.sh, as tests/emu_train.sh in fp32):
# every models/*.net (resnet20 aside) and every tests/gradcheck model in bf16, the models in
# fp16 with the loss scaler from 2^30 (its first steps overflow and are
# skipped), the small ones bit for bit, and fp16's scaler through a
# checkpoint; and the GPU's 16-bit plan against its fp32 one, bit for bit.
# The products run on the emulated tensor cores
# (cublasGemmEx, the convolutions' mma), which sum in the cpu's order.
# Skipped (77) where tests/emu.sh is.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/emu/env.sh"
. "$SRC/tests/gradcheck/data.sh"

gradcheck_data_dir "$WORK/data" 40
cd "$SRC" || exit 1 # the models name their data from the source tree

# bf16: both devices round the same values at the same points (lowp.h's
# rounding), so they differ only where their fp32 sums do before a
# rounding: a sum an fp32 ulp apart from the cpu's that lands beside a
# bf16 rounding boundary is one bf16 ulp (2^-8) off.  The emulated
# device's products sum in the cpu's order; batchnorm's statistics and
# the convolutions' split sums (cifar10) are its own: those models agree
# within 2e-3 over 6 steps (measured: 6e-4 over 20), the others bit for
# bit (within 1e-6), which a rounding point missing on either side (1e-4
# and more within a few steps) cannot pass.  The cpu's products are its
# fp32 multiply-adds here (NETRT_CPU_BF16=fp32, tests/emu/env.sh), not
# AVX512-BF16's pairs or AMX's tiles, which sum in orders of their own.
# (parity.sh's list: not resnet20, parity.sh says why)
models=$(sh "$SRC/tests/gpu/parity.sh" --list)
# shellcheck disable=SC2086 # $models: a list of paths
DEVICE=cuda STEPS=6 SAMPLES=75 BATCH=16 RTOL=2e-3 PRECISION=bf16 DATA_DIR="$WORK/data" \
    sh "$SRC/tests/gpu/parity.sh" $models "$SRC"/tests/gradcheck/*.net \
    > "$WORK/parity.bf16" 2>&1
check "[ $? -eq 0 ] && grep -q '^ok .*cifar10' '$WORK/parity.bf16'" \
    "parity with the cpu in bf16: $(grep -v -e '^ok' -e '^skip' "$WORK/parity.bf16")"
tail -n 1 "$WORK/parity.bf16"
DEVICE=cuda STEPS=20 SAMPLES=75 BATCH=16 RTOL=1e-6 PRECISION=bf16 sh "$SRC/tests/gpu/parity.sh" \
    "$SRC"/models/boston_mlp.net "$SRC"/models/digits_mlp.net "$SRC"/models/digits_cnn.net \
    "$SRC"/models/airline_rnn.net \
    > "$WORK/parity.bf16x" 2>&1
check "[ $? -eq 0 ]" "bf16 on the emulated device, bit for bit: $(grep -v '^ok' "$WORK/parity.bf16x")"

# The GPU's 16-bit plan (NETRT_ACT_BITS=16: the values kept in 2 bytes,
# loaded into working copies, read in 16 bits by the activation-derivative
# kernels) against the same runs keeping 4 bytes: a value rounded to bf16
# or fp16 loses nothing in 16 bits, so bit for bit.  The CNNs (a pool's,
# a batchnorm's, a residual add's reads), the rnn, and the gradcheck
# models whose activations need x or y (their own passes and fused).
gc=$SRC/tests/gradcheck
DEVICE=cuda-act16 STEPS=6 SAMPLES=75 BATCH=16 PRECISION=bf16 DATA_DIR="$WORK/data" \
    sh "$SRC/tests/gpu/parity.sh" "$SRC"/models/digits_cnn.net "$SRC"/models/digits_cnn_bn.net \
    "$SRC"/models/digits_resnet.net "$SRC"/models/airline_rnn.net "$gc"/smooth_acts.net \
    "$gc"/standalone_acts.net "$gc"/leaky_relu.net "$gc"/concat.net "$gc"/mul.net \
    "$gc"/branches.net "$gc"/residual.net > "$WORK/act16.bf16" 2>&1
check "[ $? -eq 0 ]" "bf16 values in 16 bits on the emulated device: $(grep -v '^ok' "$WORK/act16.bf16")"
DEVICE=cuda-act16 STEPS=10 SAMPLES=75 BATCH=16 PRECISION=fp16 FLAGS="--loss-scale 1073741824" \
    sh "$SRC/tests/gpu/parity.sh" "$SRC"/models/digits_cnn.net "$SRC"/models/digits_resnet.net \
    > "$WORK/act16.fp16" 2>&1
check "[ $? -eq 0 ]" "fp16 values in 16 bits on the emulated device: $(grep -v '^ok' "$WORK/act16.fp16")"

# fp16: the same, and the loss scaler on the device: from 2^30 the first
# ten or so steps overflow and are skipped, on both devices alike (fp16's
# finer steps make a different fp32 sum round differently eight times as
# often as bf16's: the CNNs within 1e-4 over 10 steps)
# shellcheck disable=SC2086 # $models: a list of paths
DEVICE=cuda STEPS=10 SAMPLES=75 BATCH=16 RTOL=1e-4 PRECISION=fp16 FLAGS="--loss-scale 1073741824" \
    sh "$SRC/tests/gpu/parity.sh" $models > "$WORK/parity.fp16" 2>&1
check "[ $? -eq 0 ]" "parity with the cpu in fp16: $(grep -v -e '^ok' "$WORK/parity.fp16")"
tail -n 1 "$WORK/parity.fp16"
DEVICE=cuda STEPS=20 SAMPLES=75 BATCH=16 RTOL=1e-6 PRECISION=fp16 FLAGS="--loss-scale 1073741824" \
    sh "$SRC/tests/gpu/parity.sh" "$SRC"/models/boston_mlp.net "$SRC"/models/digits_mlp.net \
    "$SRC"/models/airline_rnn.net > "$WORK/parity.fp16x" 2>&1
check "[ $? -eq 0 ]" "fp16 on the emulated device, bit for bit: $(grep -v '^ok' "$WORK/parity.fp16x")"
# ... and its scaler in a checkpoint: stopped while the scale still halves
compile "$SRC/models/digits_mlp.net" "$WORK/dm16"
f16() { "$WORK/dm16" --device cuda --precision fp16 --quiet "$@"; }
f16 --loss-scale 1073741824 --max-steps 24 --save "$WORK/f16.full.safetensors"
f16 --loss-scale 1073741824 --max-steps 6 --checkpoint "$WORK/f16ck"
f16 --resume "$WORK/f16ck" --max-steps 24 --save "$WORK/f16.cut.safetensors"
check "cmp -s '$WORK/f16.full.safetensors' '$WORK/f16.cut.safetensors'" \
    "fp16 on the emulated device, stopped at step 6 and resumed: other weights"
finish
