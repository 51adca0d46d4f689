# tests/emu_gradcheck.sh — every backward pass of the CUDA backend checked
# on netc's emulated device (tests/emu/): tests/gradcheck.sh with the GPU
# as the device, so each layer's kernels are checked against central finite
# differences and every gradient against the cpu's.
# Skipped (77) where tests/emu.sh is.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/emu/env.sh"

NETC_TRAIN_DEVICE=cuda sh "$SRC/tests/gradcheck.sh"
