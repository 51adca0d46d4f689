#!/usr/bin/env bash
# bench/images.sh — the whole image pipeline, netc against PyTorch on the
# CPU: models/cnn101.net on the bundled PNGs (data/digit_images), from the
# program's start to its end — decoding, resizing, flipping, training E
# epochs, the test — against the PyTorch script a user would write
# (bench/images.py: a Dataset over the list, torchvision's transforms, a
# DataLoader with worker processes).  Prints a markdown table of the median
# wall times of REPEAT runs each, alternating the two sides: the whole run
# (PyTorch's from its first line, imports included) and the training loop
# alone (the epochs, decoding and augmenting included, as a DataLoader
# does them then; netc's from its "trained ... in X s" line).
#
# A benchmark, not a test: it builds nothing (NETC: a built netc, default
# ./netc) and checks nothing.  Environment: PYTHON (default
# /usr/bin/python3), EPOCHS (default 5), THREADS (default 2), WORKERS (the
# DataLoader's workers and netc's --workers, default 2), REPEAT (default 3).
# Run from the top of the tree on an otherwise idle machine.
set -euo pipefail
NETC=${NETC:-./netc}
PYTHON=${PYTHON:-/usr/bin/python3}
EPOCHS=${EPOCHS:-5}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
REPEAT=${REPEAT:-3}
[ -x "$NETC" ] || { echo "images.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/netc-bench-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# the model as it is, but for its validation set (the PyTorch script has none)
sed '/^ *valid /d' models/cnn101.net > "$work/cnn101.net"
"$NETC" "$work/cnn101.net" -o "$work/cnn101"

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
: > "$work/netc.txt"
: > "$work/torch.txt"
for _ in $(seq "$REPEAT"); do
    start=$(date +%s.%N)
    "$work/cnn101" --device cpu --epochs "$EPOCHS" --threads "$THREADS" --workers "$WORKERS" \
        --metrics "$work/m.jsonl" > "$work/netc.out"
    end=$(date +%s.%N)
    acc=$(sed -n 's/.*"test_accuracy": \([^,}]*\).*/\1/p' "$work/m.jsonl" | tail -n 1)
    train=$(sed -n 's/^trained .* in \([0-9.]*\) s:.*/\1/p' "$work/netc.out")
    echo "$(echo "$end - $start" | bc) $train $acc" >> "$work/netc.txt"
    "$PYTHON" bench/images.py --root data/digit_images --epochs "$EPOCHS" \
        --workers "$WORKERS" --threads "$THREADS" > "$work/torch.json"
    "$PYTHON" -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(r["total_s"], r["train_s"], r["test_accuracy"])' "$work/torch.json" >> "$work/torch.txt"
done
n=$(cut -d' ' -f1 "$work/netc.txt" | median)
t=$(cut -d' ' -f1 "$work/torch.txt" | median)
nt=$(cut -d' ' -f2 "$work/netc.txt" | median)
tt=$(cut -d' ' -f2 "$work/torch.txt" | median)
echo "| model | images | epochs | threads | workers | netc run s | PyTorch run s | ratio | netc training s | PyTorch training s | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '| cnn101 | 500 train + 200 test PNGs | %s | %s | %s | %.2f | %.2f | %.1f | %.2f | %.2f | %.1f |\n' \
    "$EPOCHS" "$THREADS" "$WORKERS" "$n" "$t" "$(echo "$t / $n" | bc -l)" \
    "$nt" "$tt" "$(echo "$tt / $nt" | bc -l)"
echo
echo "runs (whole run s, training s, test accuracy):"
echo "  netc:    $(tr '\n' ';' < "$work/netc.txt")"
echo "  PyTorch: $(tr '\n' ';' < "$work/torch.txt")"
