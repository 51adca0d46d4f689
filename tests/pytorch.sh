#!/bin/sh
# tests/pytorch.sh — netc's training against PyTorch's, on the cpu;
# NETC_TRAIN_DEVICE=cuda runs netc's programs on a GPU (tests/emu_suite.sh:
# the emulated one), PyTorch still on the cpu.
#
# tests/pytorch_check.py does the work: for small models covering every
# layer, loss and optimizer option, and for the seed models boston_mlp,
# digits_cnn and cifar10 with their data, it checks that
#   1. PROG --max-steps 0 --save writes weights that load into the twin
#      nn.Sequential with load_state_dict(strict=True);
#   2. training from them (--no-shuffle --log-every 1 --threads 1) gives
#      PyTorch's loss at every step and PyTorch's final weights;
#   3. weights PyTorch initialised load into PROG and give the same first
#      step;
#   4. safetensors files with wrong names, shapes or dtypes are refused with
#      a message naming the tensor.
# Each of its checks is one check here.  Needs only torch (safetensors files
# are read and written by the script itself): $PYTHON if it has torch, else
# /usr/bin/python3 if that has, else the test is skipped.
. "$(dirname "$0")/lib.sh"

py=
for p in "$PYTHON" /usr/bin/python3; do
    if [ -n "$p" ] && "$p" -c 'import torch' >/dev/null 2>&1; then
        py=$p
        break
    fi
done
[ -n "$py" ] || skip "no Python with torch (tried '$PYTHON' and /usr/bin/python3)"

"$py" "$SRC/tests/pytorch_check.py" --netc "$NETC" --src "$SRC" --work "$WORK" \
    --results "$WORK/results" ${NETC_TRAIN_DEVICE:+--device "$NETC_TRAIN_DEVICE"}
rc=$?
# 0: all passed, 1: some failed; anything else (a crash, a signal) or no
# results at all is a failure of its own
check '[ "$rc" -le 1 ] && [ -s "$WORK/results" ]' \
    "pytorch_check.py did not finish (exit $rc)"
# a check whose optional module is missing is skipped, with how to have
# it: torchvision hidden here, the image model's check says so and passes
# bf16 (the cpu's): the step losses against torch.autocast(bfloat16)'s, for
# every model
if [ -z "${NETC_TRAIN_DEVICE:-}" ]; then
    "$py" "$SRC/tests/pytorch_check.py" --netc "$NETC" --src "$SRC" --work "$WORK/bf16" \
        --results "$WORK/results" --precision bf16 > "$WORK/bf16.out" 2>&1
    rc=$?
    grep 'steps within\|first step\|^NOTE: this torch' "$WORK/bf16.out"
    check '[ "$rc" -le 1 ]' "pytorch_check.py --precision bf16 did not finish (exit $rc)"
fi
mkdir -p "$WORK/hide/torchvision"
echo 'raise ImportError("hidden by tests/pytorch.sh")' > "$WORK/hide/torchvision/__init__.py"
PYTHONPATH="$WORK/hide${PYTHONPATH:+:$PYTHONPATH}" "$py" "$SRC/tests/pytorch_check.py" \
    --netc "$NETC" --src "$SRC" --work "$WORK" --only cnn101 > "$WORK/hidden.out" 2>&1
rc=$?
check '[ "$rc" -eq 0 ] && grep -q "SKIP: cnn101: needs the Python module torchvision" "$WORK/hidden.out"' \
    "without torchvision: exit $rc, $(tail -n 3 "$WORK/hidden.out")"
if [ -f "$WORK/results" ]; then
    while IFS='	' read -r status what; do
        check '[ "$status" = PASS ]' "$what"
    done <"$WORK/results"
fi
finish
