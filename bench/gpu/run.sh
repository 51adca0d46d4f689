#!/bin/bash
# bench/gpu/run.sh — step time of the seed models on one GPU: the
# netc-generated program against PyTorch on the same device, in the same
# run.  PyTorch runs four ways (bench/gpu/torch_gpu.py): eager,
# torch.compile (default), torch.compile(mode="reduce-overhead") and the
# whole step captured by hand in a torch.cuda graph.  Every side keeps the
# training set on the GPU and trains at the seed model's batch size; and
# cifar10 once more at batch 1024, against the GPU's fp32 roofline.
#
# A benchmark, not a test: it builds nothing (NETC must be a netc configured
# with CUDA), prints a markdown report on stdout and exits 0 whatever the
# figures are.  DEVICE=cpu runs the same pipeline on the cpu with few steps
# and eager PyTorch only: the check of this script on a machine without a
# GPU (its figures mean nothing).
#
# Environment:
#   NETC      the compiler (default: ./netc)
#   PYTHON    a Python with torch (default: /usr/bin/python3)
#   MODELS    models to run (default: all six)
#   VARIANTS  PyTorch variants (default: eager compile compile-ro graph)
#   DEVICE    cuda (default) or cpu
#   REPEAT    runs of each side, alternating; the median is shown (default: 3)
#   PRECISION fp32 (default) or bf16: netc's --precision, and PyTorch's
#             forward pass and loss under autocast(bfloat16)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

NETC=${NETC:-./netc}
PYTHON=${PYTHON:-/usr/bin/python3}
MODELS=${MODELS:-"boston_linear boston_mlp digits_mlp digits_cnn cifar10 cnn101"}
VARIANTS=${VARIANTS:-"eager compile compile-ro graph"}
DEVICE=${DEVICE:-cuda}
REPEAT=${REPEAT:-3}
PRECISION=${PRECISION:-fp32}
case $PRECISION in fp32 | bf16) ;; *) echo "run.sh: PRECISION is '$PRECISION': fp32 or bf16" >&2; exit 2 ;; esac

[ -x "$NETC" ] || { echo "run.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "run.sh: $PYTHON cannot import torch (set PYTHON)" >&2; exit 1; }
if [ "$DEVICE" = cpu ]; then
    VARIANTS=eager
    torch_steps="--steps 20 --warmup 3"
    REPEAT=1
else
    torch_steps="--steps 200 --warmup 20"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/netc-gpubench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Epochs of the netc program: the first two are warm-up (the first runs
# every kernel once and captures the step's graph).  Steps per epoch:
# boston 26 or 13, digits 120, the CIFAR files below 20 (10 at batch 1024).
epochs() {
    if [ "$DEVICE" = cpu ]; then echo 3; return; fi
    case $1 in
    boston_*) echo 200 ;;
    digits_*) echo 30 ;;
    *) echo 40 ;;
    esac
}

# Synthetic data in the CIFAR-10 binary format (no real CIFAR here): 20
# batches at the seed batch sizes, 10 at batch 1024.
"$PYTHON" "$root/bench/make_cifar.py" "$work/c10.bin" --records 1280 --classes 10 --seed 1
"$PYTHON" "$root/bench/make_cifar.py" "$work/c10_1024.bin" --records 10240 --classes 10 --seed 5
"$PYTHON" "$root/bench/make_cifar.py" "$work/c101.bin" --records 640 --classes 101 --seed 3

data_file() { # the training file of a run: model batch
    case $1 in
    boston_*) echo data/boston_housing.data ;;
    digits_*) echo data/optdigits.tra ;;
    cifar10 | resnet20) [ "$2" = 1024 ] && echo "$work/c10_1024.bin" || echo "$work/c10.bin" ;;
    cnn101) echo "$work/c101.bin" ;;
    esac
}

runs=()
for m in $MODELS; do
    runs+=("$m:0")
    [ "$m" = cifar10 ] && runs+=("cifar10:1024")
done

results=$work/results.jsonl
: >"$results"
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
"$work/${MODELS%% *}" --list-devices >"$work/devices.txt" 2>&1 || true

for run in "${runs[@]}"; do
    m=${run%%:*}
    b=${run##*:}
    bflag=()
    [ "$b" != 0 ] && bflag=(--batch "$b")
    data=$(data_file "$m" "$b")
    dflags=()
    case $m in cifar10 | resnet20 | cnn101) dflags=(--data "$data" --test-data "$data") ;; esac
    for rep in $(seq 1 "$REPEAT"); do
        echo "[$m batch ${b/#0/default}, run $rep/$REPEAT] netc" >&2
        "$work/$m" --device "$DEVICE" --precision "$PRECISION" --epochs "$(epochs "$m")" --seed 1 "${bflag[@]}" \
            "${dflags[@]}" --metrics "$work/$m.$b.jsonl" >"$work/$m.$b.out"
        read -r params ntrain < <(sed -n \
            's/^model [^:]*: \([0-9]*\) parameters; \([0-9]*\) training samples.*/\1 \2/p' \
            "$work/$m.$b.out")
        for v in $VARIANTS; do
            echo "[$m batch ${b/#0/default}, run $rep/$REPEAT] torch $v" >&2
            # shellcheck disable=SC2086
            if ! "$PYTHON" "$here/torch_gpu.py" "$m" --data "$data" --n-train "$ntrain" \
                "${bflag[@]}" --variant "$v" --device "$DEVICE" --precision "$PRECISION" $torch_steps \
                >"$work/$m.$b.$v.json" 2>"$work/$m.$b.$v.err"; then
                echo "{\"failed\": \"$(tail -1 "$work/$m.$b.$v.err" | tr -d '"\\')\"}" \
                    >"$work/$m.$b.$v.json"
            fi
        done
        # the batch of the run: --batch's, or the model's train line's
        batch=$b
        [ "$b" != 0 ] || batch=$(grep -o 'batch  *[0-9][0-9]*' "models/$m.net" | grep -o '[0-9][0-9]*' | head -1)
        "$PYTHON" - "$m" "$batch" "$rep" "$params" "$ntrain" "$work/$m.$b.jsonl" "$work/$m.$b" \
            "$VARIANTS" >>"$results" <<'EOF'
import json, statistics, sys
m, b, rep, params, ntrain, metrics, prefix, variants = sys.argv[1:]
recs = [json.loads(l) for l in open(metrics) if l.startswith('{"epoch"')]
torch = {v: json.load(open(f"{prefix}.{v}.json")) for v in variants.split()}
batch = int(b)
steps = -(-int(ntrain) // batch)
# epoch seconds = samples / samples_per_sec (full precision); the first two
# epochs are warm-up
per_step = [int(ntrain) / r["samples_per_sec"] / steps for r in recs[2:]] or \
           [int(ntrain) / r["samples_per_sec"] / steps for r in recs[-1:]]
print(json.dumps({"model": m, "batch": batch, "rep": int(rep), "netc_params": int(params),
                  "steps_per_epoch": steps, "netc_ms": 1e3 * statistics.median(per_step),
                  "torch": torch}))
EOF
    done
done

flops=$("$PYTHON" "$here/flops.py" cifar10 --batch 1024)
clock=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits 2>/dev/null |
    head -1 || true)

"$PYTHON" - "$results" "$work/devices.txt" "$flops" "${clock:-}" "$DEVICE" "$VARIANTS" "$PRECISION" <<'EOF'
import json, re, statistics, sys
path, devices, flops, clock, device, variants, precision = sys.argv[1:]
variants = variants.split()
rows = [json.loads(l) for l in open(path)]
dev_text = open(devices).read().strip()
torch_version = next((t.get("torch_version") for r in rows for t in r["torch"].values()
                      if "torch_version" in t), "?")
gpu = next((t.get("device") for r in rows for t in r["torch"].values() if "device" in t), device)
print(f"device: {gpu}; torch {torch_version}")
print("```")
print(dev_text)
print("```")
print()
print("Step time in milliseconds, median over runs (netc: epoch seconds / steps, epochs after "
      "the first two; PyTorch: bench/gpu/torch_gpu.py, median of 20-step blocks after "
      "warm-up). Data resident on the device for every side; " +
      ("exact fp32 (no TF32) for every side" if precision == "fp32" else
       "bf16 for every side: netc's --precision bf16, PyTorch's forward pass and loss under "
       "autocast(bfloat16), fp32 weights and optimizer on both") +
      ". Ratios: PyTorch / netc (> 1: netc is faster); best = the fastest PyTorch variant.")
print()
head = "| model | batch | netc | " + " | ".join(variants) + " | eager / netc | best / netc |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
groups = {}
for r in rows:
    groups.setdefault((r["model"], r["batch"]), []).append(r)
notes = []
for (m, b), g in groups.items():
    netc = statistics.median(r["netc_ms"] for r in g)
    cells, times = [], {}
    for v in variants:
        ok = [r["torch"][v]["step_ms"] for r in g if "step_ms" in r["torch"][v]]
        if ok:
            times[v] = statistics.median(ok)
            cells.append(f"{times[v]:.4g}")
        else:
            cells.append("failed")
            notes.append(f"{m} batch {b} {v}: {g[-1]['torch'][v].get('failed', '?')}")
        for r in g:
            p = r["torch"][v].get("params")
            if p is not None and p != r["netc_params"]:
                notes.append(f"{m}: netc has {r['netc_params']} parameters, torch {p}")
    e = f"{times['eager'] / netc:.3g}" if "eager" in times else "-"
    bst = f"{min(times.values()) / netc:.3g}" if times else "-"
    print(f"| {m} | {b} | {netc:.4g} | " + " | ".join(cells) + f" | {e} | {bst} |")
for n in sorted(set(notes)):
    print(f"\nNOTE: {n}")
f = json.loads(flops)
c10 = groups.get(("cifar10", 1024))
if c10:
    print()
    print(f"cifar10 at batch 1024: {f['step_flops'] / 1e9:.1f} GFLOP a step (products and "
          "convolutions: forward, weight and input gradients; bench/gpu/flops.py).")
    netc = statistics.median(r["netc_ms"] for r in c10)
    achieved = f["step_flops"] / (netc * 1e-3) / 1e12
    line = f"netc: {netc:.3f} ms a step = {achieved:.1f} TFLOP/s"
    sms = re.search(r"(\d+) SMs", dev_text)
    if sms and clock.strip().isdigit() and precision == "fp32":
        peak = int(sms.group(1)) * 128 * 2 * int(clock) * 1e6 / 1e12
        line += (f"; fp32 peak {peak:.1f} TFLOP/s ({sms.group(1)} SMs x 128 lanes x 2 x "
                 f"{clock} MHz): {achieved / peak * 100:.0f} % of the roofline, "
                 f"{peak / achieved:.2f}x from it")
    print(line)
EOF
