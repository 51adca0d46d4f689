# tests/emu_suite.sh — the training loop's tests again, on netc's emulated
# CUDA device (tests/emu/, built by tests/emu/env.sh): tests/train.sh
# (validation, schedules, checkpoints and --resume, signals, TensorBoard,
# --eval, --predict, MNIST, write errors, the progress line),
# tests/images.sh (image lists, the loader's flipped batches),
# tests/embed.sh (the C API: a copy of the model on the device, within
# 1e-4 of the cpu) and tests/pytorch.sh (every layer, loss and optimizer
# against PyTorch on the cpu, with its tolerances), each run with
# NETC_TRAIN_DEVICE=cuda in the environment env.sh makes, so that every
# program they build runs on the emulated device (and NETC_TRAIN_EMULATED=1:
# train.sh sizes for its pace what keeps a program at work while a signal
# comes).  Each script is one check here, its own counts printed; a script
# that fails has its output printed whole.  A script that skips for a
# missing optional dependency (torch, stb_image) is left out, saying so;
# none skips for want of a GPU.  Skipped (77) where tests/emu.sh is.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/emu/env.sh"

for t in train images embed pytorch; do
    NETC_TRAIN_DEVICE=cuda NETC_TRAIN_EMULATED=1 sh "$SRC/tests/$t.sh" > "$WORK/$t.log" 2>&1
    st=$?
    if [ $st -eq 77 ]; then
        echo "$t.sh on the emulated device: $(grep -m 1 '^SKIP' "$WORK/$t.log")"
        continue
    fi
    echo "$t.sh on the emulated device: $(tail -n 1 "$WORK/$t.log")"
    [ $st -eq 0 ] || sed "s/^/    /" "$WORK/$t.log"
    check "[ $st -eq 0 ]" "$t.sh on the emulated device (exit $st)"
done
finish
