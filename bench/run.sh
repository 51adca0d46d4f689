#!/bin/bash
# bench/run.sh — step time of the seed models: the netc-generated CPU
# program against PyTorch on the CPU, in the same run on the same machine.
#
# A benchmark, not a test: it builds nothing (set NETC to a built netc; the
# default is ./netc in the repository root), prints a markdown table and
# exits 0 whatever the figures are.  See bench/README.md for the method.
#
# Environment:
#   NETC      the compiler (default: ./netc); NETC_CFLAGS etc. reach it as usual
#   PYTHON    a Python with torch (default: /usr/bin/python3)
#   THREADS   thread counts to run, space separated (default: "1 2")
#   MODELS    models to run (default: all eight)
#   REPEAT    runs of each side per model and thread count, alternating
#             netc and PyTorch; the table shows the median (default: 3)
#   SCALE     multiply every epoch count by this integer (default: 1)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

NETC=${NETC:-./netc}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-"1 2"}
MODELS=${MODELS:-"boston_linear boston_mlp digits_mlp digits_cnn cifar10 cnn101 digits_cnn_bn airline_rnn"}
REPEAT=${REPEAT:-3}
SCALE=${SCALE:-1}

[ -x "$NETC" ] || { echo "run.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "run.sh: $PYTHON cannot import torch (set PYTHON)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/netc-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Epochs per model and run: netc, torch.  The first epoch of each run is
# warm-up and left out of the median.  Boston epochs are 26 or 13 steps,
# digits epochs 120; the synthetic CIFAR files below hold exactly 10 batches.
epochs() {
    local e
    case $1 in
    boston_linear | boston_mlp) e="1000 40" ;;
    digits_mlp) e="40 6" ;;
    digits_cnn | digits_cnn_bn) e="6 6" ;;
    airline_rnn) e="400 40" ;;
    cifar10 | cnn101) e="6 6" ;;
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
    airline_rnn) echo data/airline_train.csv ;;
    cifar10) echo "$work/c10_train.bin" ;;
    cnn101) echo "$work/c101_train.bin" ;;
    esac
}

# cnn101 reads a list of image files; here it reads the synthetic records
# instead (the same tensors, no decoding), as the PyTorch side does.
for m in $MODELS; do
    src=models/$m.net
    if [ "$m" = cnn101 ]; then
        sed -e '/^ *transform /d' -e '/^ *valid /d' -e 's/images("[^"]*")/cifar10("-")/' "$src" >"$work/$m.net"
        src=$work/$m.net
    fi
    "$NETC" "$src" -o "$work/$m"
done

# Interference: the CPU time the whole machine spent busy during a run, less
# the CPU time of the run itself (this shell's reaped children), as a share
# of the machine's capacity over the run's wall time.
ncpu=$(getconf _NPROCESSORS_ONLN)
tick=$(getconf CLK_TCK)
snap() { # prints: busy-ticks own-child-ticks nanoseconds
    local busy own
    busy=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat)
    own=$(awk '{sub(/^.*\) /, ""); print $14 + $15}' "/proc/$$/stat")
    echo "$busy $own $(date +%s%N)"
}
others() { # others BEFORE AFTER -> percent of the machine used by others
    awk -v n="$ncpu" -v t="$tick" 'BEGIN {
        split(ARGV[1], a, " "); split(ARGV[2], b, " ");
        wall = (b[3] - a[3]) / 1e9; other = ((b[1] - a[1]) - (b[2] - a[2])) / t;
        p = wall > 0 ? 100 * other / (wall * n) : 0; if (p < 0) p = 0;
        printf "%.1f", p; exit }' "$1" "$2"
}

results=$work/results.jsonl
: >"$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

for k in $THREADS; do
    for m in $MODELS; do
        read -r ne te <<<"$(epochs "$m")"
        for rep in $(seq 1 "$REPEAT"); do
            echo "[$m, $k thread(s), run $rep/$REPEAT] netc $ne epochs, torch $te epochs" >&2
            # Both sides get the thread count through their own knob and
            # through the environment (OpenMP's pool and OpenBLAS's, where
            # linked).
            s0=$(snap)
            OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k "$work/$m" --device cpu \
                --threads "$k" --epochs "$ne" --seed 1 $(data_flags "$m") \
                --metrics "$work/$m.$k.jsonl" >"$work/$m.$k.out"
            s1=$(snap)
            # "model NAME: P parameters; N training samples"; the batch, from --help
            nbatch=$("$work/$m" --help | sed -n 's/.*--batch N.*(default: \([0-9]*\)).*/\1/p')
            read -r params ntrain < <(sed -n \
                's/^model [^:]*: \([0-9]*\) parameters; \([0-9]*\) training samples.*/\1 \2/p' \
                "$work/$m.$k.out")
            OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k "$PYTHON" "$here/torch_models.py" "$m" \
                --threads "$k" --epochs "$te" --warmup 1 --seed 1 --data "$(torch_data "$m")" \
                --n-train "$ntrain" >"$work/$m.$k.torch.json"
            s2=$(snap)
            "$PYTHON" - "$m" "$k" "$rep" "$params" "$ntrain" "$nbatch" "$work/$m.$k.jsonl" \
                "$work/$m.$k.torch.json" "$(others "$s0" "$s1")" "$(others "$s1" "$s2")" \
                >>"$results" <<'EOF'
import json, statistics, sys
m, k, rep, params, ntrain, nbatch, metrics, torch_json, o_netc, o_torch = sys.argv[1:]
t = json.load(open(torch_json))
batch = t["batch"]
if int(nbatch) != batch:
    sys.exit(f"run.sh: {m}: netc trains in batches of {nbatch}, torch_models.py of {batch}")
steps = -(-int(ntrain) // batch)
# An epoch's seconds = samples / samples_per_sec: the "seconds" field is
# rounded to the microsecond, samples_per_sec carries the full precision.
recs = [json.loads(l) for l in open(metrics) if l.startswith('{"epoch"')]
per_step = [int(ntrain) / r["samples_per_sec"] / steps for r in recs[1:]]
print(json.dumps({
    "model": m, "threads": int(k), "rep": int(rep), "batch": batch, "steps_per_epoch": steps,
    "netc_params": int(params), "torch_params": t["params"],
    "netc_ms": 1e3 * statistics.median(per_step), "torch_ms": t["step_ms"],
    "torch_ms_step_median": t["step_ms_per_step_median"],
    "others_netc": float(o_netc), "others_torch": float(o_torch),
    "torch_version": t["torch_version"],
}))
EOF
        done
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(($(date +%s) - started))

"$PYTHON" - "$results" "$load_before" "$load_after" "$elapsed" "$REPEAT" <<'EOF'
import json, os, statistics, sys
path, load_before, load_after, elapsed, repeat = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
cpu = "?"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
print(f"machine: {cpu}, {os.cpu_count()} CPUs; torch {rows[0]['torch_version'] if rows else '?'}; "
      f"measured in {elapsed} s; load average before {load_before}, after {load_after}")
print()
print("Method: both sides train on data already in memory; per epoch the clock covers the "
      "whole training loop: the epoch's shuffle and its steps (batch gather, zero_grad, "
      "forward, loss, backward, optimizer step), not the test-set evaluation or start-up. netc: each --metrics record's "
      "samples_per_sec (epoch seconds = samples / samples_per_sec); PyTorch: time.perf_counter "
      "around the same loop. A run's step time = median over its epochs after the first "
      "(warm-up) of epoch seconds / steps in the epoch; the table shows the median over "
      f"{repeat} alternating runs of each side. Ratio = PyTorch / netc (> 1: netc is faster). "
      "'others' = the largest share of the machine's CPU that other processes used during "
      "any of the runs of that row (above a few percent, the row is suspect).")
print()
print("| model | batch | threads | netc step ms | torch step ms | ratio torch/netc | others % |")
print("|---|---:|---:|---:|---:|---:|---:|")
groups = {}
for r in rows:
    groups.setdefault((r["threads"], r["model"]), []).append(r)
order = []
for r in rows:
    key = (r["threads"], r["model"])
    if key not in order:
        order.append(key)
order.sort(key=lambda key: key[0])
bad = set()
for key in order:
    g = groups[key]
    netc = statistics.median(r["netc_ms"] for r in g)
    torch = statistics.median(r["torch_ms"] for r in g)
    oth = max(max(r["others_netc"], r["others_torch"]) for r in g)
    ratio = torch / netc if netc > 0 else float("inf")
    print(f"| {key[1]} | {g[0]['batch']} | {key[0]} | {netc:.4g} | {torch:.4g} | "
          f"{ratio:.3g} | {oth:.0f} |")
    for r in g:
        if r["netc_params"] != r["torch_params"]:
            bad.add(f"{r['model']}: netc has {r['netc_params']} parameters, torch {r['torch_params']}")
for b in sorted(bad):
    print(f"\nWARNING: the architectures differ: {b}")
print("\nEach run (netc ms / torch ms / others % during netc, torch):")
for key in order:
    runs = ", ".join(f"{r['netc_ms']:.4g}/{r['torch_ms']:.4g} ({r['others_netc']:.0f}, "
                     f"{r['others_torch']:.0f})" for r in groups[key])
    print(f"- {key[1]}, {key[0]} thread(s): {runs}")
EOF
exit 0
