#!/bin/bash
# bench/run.sh — step time of the six seed models: the netc-generated CPU
# program against PyTorch on the CPU, in the same run on the same machine.
#
# A benchmark, not a test: it builds nothing (set NETC to a built netc; the
# default is ./netc in the repository root), prints a markdown table and
# exits 0 whatever the figures are.  See bench/README.md for the method.
#
# Environment:
#   NETC      the compiler (default: ./netc)
#   PYTHON    a Python with torch (default: /usr/bin/python3)
#   THREADS   thread counts to run, space separated (default: "1 2")
#   MODELS    models to run (default: all six)
#   SCALE     multiply every epoch count by this integer (default: 1)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

NETC=${NETC:-./netc}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-"1 2"}
MODELS=${MODELS:-"boston_linear boston_mlp digits_mlp digits_cnn cifar10 cnn101"}
SCALE=${SCALE:-1}

[ -x "$NETC" ] || { echo "run.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "run.sh: $PYTHON cannot import torch (set PYTHON)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/netc-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Epochs per model: netc, torch.  The first epoch of each run is warm-up and
# left out of the median.  Epochs are short for boston (26 or 13 steps) and
# long for digits (120 steps); the synthetic CIFAR files below hold exactly
# 10 batches each.
epochs() {
    local e
    case $1 in
    boston_linear | boston_mlp) e="1000 40" ;;
    digits_mlp) e="40 6" ;;
    digits_cnn) e="6 6" ;;
    cifar10 | cnn101) e="8 8" ;;
    *) echo "run.sh: unknown model $1" >&2; exit 1 ;;
    esac
    set -- $e
    echo $(($1 * SCALE)) $(($2 * SCALE))
}

# Synthetic data in the CIFAR-10 binary format (there is no real CIFAR here):
# cifar10 trains on 640 records = 10 batches of 64, cnn101 on 320 = 10 of 32.
"$PYTHON" "$here/make_cifar.py" "$work/c10_train.bin" --records 640 --classes 10 --seed 1
"$PYTHON" "$here/make_cifar.py" "$work/c10_test.bin" --records 64 --classes 10 --seed 2
"$PYTHON" "$here/make_cifar.py" "$work/c101_train.bin" --records 320 --classes 101 --seed 3
"$PYTHON" "$here/make_cifar.py" "$work/c101_test.bin" --records 32 --classes 101 --seed 4

data_flags() { # the generated program's data flags for a model
    case $1 in
    cifar10) echo --data "$work/c10_train.bin" --test-data "$work/c10_test.bin" ;;
    cnn101) echo --data "$work/c101_train.bin" --test-data "$work/c101_test.bin" ;;
    esac
}
torch_data() { # the training file the PyTorch side reads
    case $1 in
    boston_*) echo data/boston_housing.data ;;
    digits_*) echo data/optdigits.tra ;;
    cifar10) echo "$work/c10_train.bin" ;;
    cnn101) echo "$work/c101_train.bin" ;;
    esac
}

for m in $MODELS; do
    "$NETC" "models/$m.net" -o "$work/$m"
done

results=$work/results.jsonl
: >"$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

for k in $THREADS; do
    for m in $MODELS; do
        read -r ne te <<<"$(epochs "$m")"
        echo "[$m, $k thread(s)] netc: $ne epochs ..." >&2
        # Both sides get the thread count through their own knob and through
        # the environment (OpenBLAS's own pool, OpenMP's).
        OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k "$work/$m" --device cpu \
            --threads "$k" --epochs "$ne" --seed 1 $(data_flags "$m") \
            --metrics "$work/$m.$k.jsonl" >"$work/$m.$k.out"
        # "model NAME: P parameters; N training samples"
        read -r params ntrain < <(sed -n 's/^model [^:]*: \([0-9]*\) parameters; \([0-9]*\) training samples.*/\1 \2/p' \
            "$work/$m.$k.out")
        echo "[$m, $k thread(s)] torch: $te epochs ..." >&2
        OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k "$PYTHON" "$here/torch_models.py" "$m" \
            --threads "$k" --epochs "$te" --warmup 1 --seed 1 --data "$(torch_data "$m")" \
            --n-train "$ntrain" >"$work/$m.$k.torch.json"
        "$PYTHON" - "$m" "$k" "$params" "$ntrain" "$work/$m.$k.jsonl" \
            "$work/$m.$k.torch.json" >>"$results" <<'EOF'
import json, statistics, sys
m, k, params, ntrain, metrics, torch_json = sys.argv[1:]
t = json.load(open(torch_json))
batch = t["batch"]
steps = -(-int(ntrain) // batch)
# seconds of an epoch's training loop = samples / samples_per_sec (the
# "seconds" field is rounded to the microsecond; the rate has more digits).
recs = [json.loads(l) for l in open(metrics) if l.startswith('{"epoch"')]
per_step = [int(ntrain) / r["samples_per_sec"] / steps for r in recs[1:]]
print(json.dumps({
    "model": m, "threads": int(k), "batch": batch, "steps_per_epoch": steps,
    "netc_params": int(params), "torch_params": t["params"],
    "netc_epochs_measured": len(per_step), "torch_epochs_measured": t["epochs_measured"],
    "netc_ms": 1e3 * statistics.median(per_step),
    "torch_ms": t["step_ms"], "torch_ms_step_median": t["step_ms_per_step_median"],
    "torch_version": t["torch_version"],
}))
EOF
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

"$PYTHON" - "$results" "$load_before" "$load_after" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = "?"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
import os
print(f"machine: {cpu}, {os.cpu_count()} CPUs; torch {rows[0]['torch_version'] if rows else '?'}; "
      f"load average before {sys.argv[2]}, after {sys.argv[3]}")
print()
print("Method: each side trains on data already in memory; per epoch, the clock runs over "
      "the training steps only (batch gather, forward, loss, backward, optimizer step), not "
      "over the shuffle, the evaluation or start-up. netc: the 'samples_per_sec' of each "
      "--metrics record; PyTorch: time.perf_counter around the same loop. Step time = median "
      "over the epochs after the first (warm-up) of epoch seconds / steps in the epoch. "
      "Ratio = PyTorch / netc (> 1: netc is faster).")
print()
print("| model | batch | steps/epoch | threads | netc step ms | torch step ms | ratio torch/netc |")
print("|---|---:|---:|---:|---:|---:|---:|")
bad = []
for r in sorted(rows, key=lambda r: (r["threads"],)):
    ratio = r["torch_ms"] / r["netc_ms"] if r["netc_ms"] > 0 else float("inf")
    print(f"| {r['model']} | {r['batch']} | {r['steps_per_epoch']} | {r['threads']} | "
          f"{r['netc_ms']:.4g} | {r['torch_ms']:.4g} | {ratio:.3g} |")
    if r["netc_params"] != r["torch_params"]:
        bad.append(f"{r['model']}: netc has {r['netc_params']} parameters, torch {r['torch_params']}")
for b in bad:
    print(f"\nWARNING: architectures differ: {b}")
EOF
exit 0
