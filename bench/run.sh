#!/bin/bash
# bench/run.sh — step time of the seed models: the netc-generated CPU
# program against PyTorch on the CPU, in the same run on the same machine.
# PyTorch is today's: torch 2.x from PyPI, in a virtual environment that
# bench/torch_env.sh makes (once; several GB), run eagerly and through
# torch.compile; another torch (Debian's 1.13 in /usr/bin/python3) adds an
# eager column where there is one.
#
# A benchmark, not a test: it builds nothing (set NETC to a built netc; the
# default is ./netc in the repository root), prints a markdown table and
# exits 0 whatever the figures are.  See bench/README.md for the method.
#
# Environment:
#   NETC          the compiler (default: ./netc); NETC_CFLAGS etc. reach it as usual
#   TORCH_PYTHON  a Python with torch 2.x (default: bench/torch_env.sh's venv,
#                 made if absent; NETC_BENCH_VENV etc. reach that script)
#   TORCH_MODES   how torch 2.x runs: "eager compile" (default), or one of them
#   COMPILE_MODE  torch.compile's mode (default: default)
#   PYTHON        a Python with another torch, for the extra eager column
#                 (default: /usr/bin/python3; set empty: no such column)
#   THREADS       thread counts to run, space separated (default: "1 2")
#   MODELS        models to run (default: all ten)
#   REPEAT        runs of each side per model and thread count, alternating
#                 netc and PyTorch; the table shows the median (default: 3)
#   SCALE         multiply every epoch count by this integer (default: 1)
#   RUN_TIMEOUT   seconds one run of one side may take (default: 1200)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

NETC=${NETC:-./netc}
TORCH_MODES=${TORCH_MODES:-"eager compile"}
COMPILE_MODE=${COMPILE_MODE:-default}
PYTHON=${PYTHON-/usr/bin/python3}
THREADS=${THREADS:-"1 2"}
MODELS=${MODELS:-"boston_linear boston_mlp digits_mlp digits_cnn cifar10 cnn101 digits_cnn_bn airline_rnn digits_resnet resnet20"}
REPEAT=${REPEAT:-3}
SCALE=${SCALE:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}

[ -x "$NETC" ] || { echo "run.sh: $NETC: no netc there (set NETC)" >&2; exit 1; }
for mode in $TORCH_MODES; do
    case $mode in
    eager | compile) ;;
    *) echo "run.sh: TORCH_MODES: '$mode' is neither eager nor compile" >&2; exit 1 ;;
    esac
done
if [ -z "${TORCH_PYTHON:-}" ]; then
    TORCH_PYTHON=$("$here/torch_env.sh") ||
        { echo "run.sh: no PyTorch 2.x environment (bench/torch_env.sh says why above;" \
            "or set TORCH_PYTHON to a Python with torch 2.x)" >&2; exit 1; }
fi
"$TORCH_PYTHON" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' \
    2>/dev/null ||
    { echo "run.sh: $TORCH_PYTHON cannot import torch 2.x (set TORCH_PYTHON)" >&2; exit 1; }
# The PyTorch sides, in the order each round runs them: torch 2.x's modes,
# then "system", the extra column's torch.
sides=$TORCH_MODES
if [ -n "$PYTHON" ]; then
    if "$PYTHON" -c 'import torch' 2>/dev/null; then
        sides="$sides system"
    else
        echo "run.sh: $PYTHON cannot import torch: no extra column (PYTHON= says none)" >&2
    fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/netc-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Epochs per model and run: netc, torch.  The first epoch of each run is
# warm-up and left out of the median.  Boston epochs are 26 or 13 steps,
# digits epochs 120; the synthetic CIFAR files below hold exactly 10 batches.
epochs() {
    local n t
    case $1 in
    boston_linear | boston_mlp) n=1000 t=40 ;;
    digits_mlp) n=40 t=6 ;;
    digits_cnn | digits_cnn_bn | digits_resnet) n=6 t=6 ;;
    airline_rnn) n=400 t=40 ;;
    cifar10 | cnn101) n=6 t=6 ;;
    resnet20) n=3 t=3 ;;
    *) echo "run.sh: unknown model $1" >&2; exit 1 ;;
    esac
    echo $((n * SCALE)) $((t * SCALE))
}

# Synthetic data in the CIFAR-10 binary format (there is no real CIFAR here):
# cifar10 trains on 640 records = 10 batches of 64, cnn101 on 320 = 10 of 32,
# resnet20 on 1280 = 10 of 128.
"$TORCH_PYTHON" "$here/make_cifar.py" "$work/c10_train.bin" --records 640 --classes 10 --seed 1
"$TORCH_PYTHON" "$here/make_cifar.py" "$work/c10_test.bin" --records 64 --classes 10 --seed 2
"$TORCH_PYTHON" "$here/make_cifar.py" "$work/c101_train.bin" --records 320 --classes 101 --seed 3
"$TORCH_PYTHON" "$here/make_cifar.py" "$work/c101_test.bin" --records 32 --classes 101 --seed 4
"$TORCH_PYTHON" "$here/make_cifar.py" "$work/c10r_train.bin" --records 1280 --classes 10 --seed 5

data_flags() { # the generated program's data flags for a model, into the array dflags
    case $1 in
    cifar10) dflags=(--data "$work/c10_train.bin" --test-data "$work/c10_test.bin") ;;
    cnn101) dflags=(--data "$work/c101_train.bin" --test-data "$work/c101_test.bin") ;;
    resnet20) dflags=(--data "$work/c10r_train.bin" --test-data "$work/c10_test.bin") ;;
    *) dflags=() ;;
    esac
}
torch_data() { # the training file the PyTorch side reads
    case $1 in
    boston_*) echo data/boston_housing.data ;;
    digits_*) echo data/optdigits.tra ;;
    airline_rnn) echo data/airline_train.csv ;;
    cifar10) echo "$work/c10_train.bin" ;;
    cnn101) echo "$work/c101_train.bin" ;;
    resnet20) echo "$work/c10r_train.bin" ;;
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

# One run of a PyTorch side: torch_side SIDE K MODEL EPOCHS NTRAIN writes
# torch_models.py's JSON to $work/MODEL.K.SIDE.json or, should the run fail
# (a compiler error, the time limit), {"error": ...} with the last line
# that is not blank it wrote to stderr: the table then shows the other
# sides' figures and says what failed.
torch_side() {
    local side=$1 k=$2 m=$3 te=$4 ntrain=$5 py=$TORCH_PYTHON rc=0 why
    local flags=() out=$work/$3.$2.$1
    case $side in
    compile) flags=(--compile --compile-mode "$COMPILE_MODE") ;;
    system) py=$PYTHON ;;
    esac
    OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k timeout "$RUN_TIMEOUT" "$py" \
        "$here/torch_models.py" "$m" --threads "$k" --epochs "$te" --warmup 1 --seed 1 \
        --data "$(torch_data "$m")" --n-train "$ntrain" "${flags[@]}" \
        >"$out.json" 2>"$out.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        why=$(awk 'NF { last = $0 } END { print last }' "$out.err")
        [ "$rc" -eq 124 ] && why="no result within RUN_TIMEOUT=$RUN_TIMEOUT s"
        "$TORCH_PYTHON" -c 'import json, sys; print(json.dumps({"error": sys.argv[1]}))' \
            "exit status $rc: $why" >"$out.json"
    fi
}

results=$work/results.jsonl
: >"$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

for k in $THREADS; do
    for m in $MODELS; do
        read -r ne te <<<"$(epochs "$m")"
        for rep in $(seq 1 "$REPEAT"); do
            # shellcheck disable=SC2086 # $sides: a list of words
            echo "[$m, $k thread(s), run $rep/$REPEAT] netc $ne epochs, then torch $te" \
                "epochs each:" $sides >&2
            # Every side gets the thread count through its own knob and
            # through the environment (OpenMP's pool and OpenBLAS's, where
            # linked).
            data_flags "$m"
            s0=$(snap)
            OMP_NUM_THREADS=$k OPENBLAS_NUM_THREADS=$k timeout "$RUN_TIMEOUT" "$work/$m" \
                --device cpu --threads "$k" --epochs "$ne" --seed 1 "${dflags[@]}" \
                --metrics "$work/$m.$k.jsonl" >"$work/$m.$k.out" ||
                { echo "run.sh: $m: the generated program failed" >&2; exit 1; }
            s1=$(snap)
            o_netc=$(others "$s0" "$s1")
            # "model NAME: P parameters; N training samples"; the batch, from --help
            nbatch=$("$work/$m" --help | sed -n 's/.*--batch N.*(default: \([0-9]*\)).*/\1/p')
            read -r params ntrain < <(sed -n \
                's/^model [^:]*: \([0-9]*\) parameters; \([0-9]*\) training samples.*/\1 \2/p' \
                "$work/$m.$k.out")
            runs=() # SIDE=JSON=others% for each side
            for side in $sides; do
                torch_side "$side" "$k" "$m" "$te" "$ntrain"
                s2=$(snap)
                runs+=("$side=$work/$m.$k.$side.json=$(others "$s1" "$s2")")
                s1=$s2
            done
            "$TORCH_PYTHON" - "$m" "$k" "$rep" "$params" "$ntrain" "$nbatch" "$work/$m.$k.jsonl" \
                "$o_netc" "${runs[@]}" >>"$results" <<'EOF'
import json, statistics, sys
m, k, rep, params, ntrain, nbatch, metrics, o_netc = sys.argv[1:9]
sides = {}
for arg in sys.argv[9:]:
    side, path, others = arg.split("=")
    t = json.load(open(path))
    t["others"] = float(others)
    if "error" not in t and int(nbatch) != t["batch"]:
        sys.exit(f"run.sh: {m}: netc trains in batches of {nbatch}, "
                 f"torch_models.py ({side}) of {t['batch']}")
    sides[side] = t
steps = -(-int(ntrain) // int(nbatch))
# An epoch's seconds = samples / samples_per_sec: the "seconds" field is
# rounded to the microsecond, samples_per_sec carries the full precision.
recs = [json.loads(l) for l in open(metrics) if l.startswith('{"epoch"')]
per_step = [int(ntrain) / r["samples_per_sec"] / steps for r in recs[1:]]
print(json.dumps({
    "model": m, "threads": int(k), "rep": int(rep), "batch": int(nbatch),
    "steps_per_epoch": steps, "netc_params": int(params),
    "netc_ms": 1e3 * statistics.median(per_step), "others_netc": float(o_netc),
    "sides": sides,
}))
EOF
        done
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(($(date +%s) - started))

# shellcheck disable=SC2086 # $sides: a list of words
"$TORCH_PYTHON" - "$results" "$load_before" "$load_after" "$elapsed" "$REPEAT" "$COMPILE_MODE" \
    "$TORCH_PYTHON" "$PYTHON" $sides <<'EOF'
import json, os, statistics, sys
path, load_before, load_after, elapsed, repeat, compile_mode, torch_py, system_py = sys.argv[1:9]
sides = sys.argv[9:]
rows = [json.loads(l) for l in open(path)]

# The machine: its CPU and which of the vector instruction sets that matter
# to both sides' kernels it has.
cpu, flags = "?", set()
for line in open("/proc/cpuinfo"):
    if line.startswith("model name") and cpu == "?":
        cpu = line.split(":", 1)[1].strip()
    elif line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
isa = ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"]
have = " ".join(f for f in isa if f in flags) or "none of them"
lack = " ".join(f for f in isa if f not in flags)
print(f"machine: {cpu}, {os.cpu_count()} CPUs; instruction sets: {have}"
      + (f" (not: {lack})" if lack else ""))


def about(side):  # a side's torch version and the ISA of its kernels
    for r in rows:
        t = r["sides"].get(side, {})
        if "torch_version" in t:
            return f"{t['torch_version']} (kernels: {t['cpu_capability']})"
    return "? (no run of it succeeded)"


modes = [s for s in sides if s != "system"]
if modes:
    print(f"torch 2.x: {about(modes[0])}, {torch_py}: {' and '.join(modes)}"
          + (f" (torch.compile mode {compile_mode})" if "compile" in modes else ""))
if "system" in sides:
    print(f"extra column: torch {about('system')}, {system_py}: eager")
print(f"measured in {elapsed} s; load average before {load_before}, after {load_after}")
print()
print("Method: both sides train on data already in memory; per epoch the clock covers the "
      "whole training loop: the epoch's shuffle and its steps (batch gather, zero_grad, "
      "forward, loss, backward, optimizer step), not the test-set evaluation or start-up. "
      "netc: each --metrics record's samples_per_sec (epoch seconds = samples / "
      "samples_per_sec); PyTorch: time.perf_counter around the same loop. A run's step time "
      "= median over its epochs after the first (warm-up; with torch.compile, the epoch that "
      "compiles) of epoch seconds / steps in the epoch; the table shows the median over "
      f"{repeat} alternating runs of each side. 'compile' = the step (zero_grad, forward, "
      "loss, backward, optimizer step) through torch.compile, compile time not counted; "
      "'best' = the faster of torch 2 eager and compile; ratio = best / netc (> 1: netc "
      "is faster). 'others' = the largest share of the machine's CPU that other processes "
      "used during any of the runs of that row (above a few percent, the row is suspect).")
print()

labels = {"eager": "torch 2 eager", "compile": "torch 2 compile"}
if "system" in sides:
    labels["system"] = f"torch {about('system').split()[0]} eager"
# torch 2's columns, their best and the ratio, then the extra column
head = ["model", "batch", "threads", "netc step ms"] + [f"{labels[s]} ms" for s in modes]
if modes:
    head += ["best torch 2 ms", "ratio best/netc"]
if "system" in sides:
    head.append(f"{labels['system']} ms")
head.append("others %")
print("| " + " | ".join(head) + " |")
print("|---|" + "---:|" * (len(head) - 1))

groups, order = {}, []
for r in rows:
    key = (r["threads"], r["model"])
    if key not in groups:
        order.append(key)
    groups.setdefault(key, []).append(r)
order.sort(key=lambda key: key[0])


def med(g, side):  # the median step ms of a side's runs that succeeded, or None
    ms = [r["sides"][side]["step_ms"] for r in g if "step_ms" in r["sides"][side]]
    return statistics.median(ms) if ms else None


def fmt(v):
    return "failed" if v is None else f"{v:.4g}"


notes = set()
for key in order:
    g = groups[key]
    netc = statistics.median(r["netc_ms"] for r in g)
    cells = [key[1], str(g[0]["batch"]), str(key[0]), fmt(netc)]
    cells += [fmt(med(g, s)) for s in modes]
    if modes:
        got = [v for v in (med(g, s) for s in modes) if v is not None]
        best = min(got) if got else None
        cells += [fmt(best), "—" if best is None else f"{best / netc:.3g}"]
    if "system" in sides:
        cells.append(fmt(med(g, "system")))
    oth = max(max([r["others_netc"]] + [t["others"] for t in r["sides"].values()]) for r in g)
    cells.append(f"{oth:.0f}")
    print("| " + " | ".join(cells) + " |")
    for r in g:
        for s, t in r["sides"].items():
            run = f"{r['model']}, {r['threads']} thread(s), {labels[s]}, run {r['rep']}"
            if "error" in t:
                notes.add(f"FAILED: {run}: {t['error']}")
            elif t["params"] != r["netc_params"]:
                notes.add(f"WARNING: the architectures differ: {r['model']}: netc has "
                          f"{r['netc_params']} parameters, {labels[s]} {t['params']}")
            elif t.get("timed_compiles"):
                notes.add(f"WARNING: {run}: torch.compile compiled {t['timed_compiles']} "
                          "graph(s) after the warm-up epoch: its figure counts compile time")
for n in sorted(notes):
    print(f"\n{n}")

print(f"\nEach run (netc ms / {' / '.join(labels[s] + ' ms' for s in sides)}; others % "
      "during each run; [torch.compile's warm-up epoch in s, the compiling included]):")
for key in order:
    runs = []
    for r in groups[key]:
        ms = "/".join([f"{r['netc_ms']:.4g}"] + [fmt(r["sides"][s].get("step_ms")) for s in sides])
        oth = ", ".join([f"{r['others_netc']:.0f}"] + [f"{r['sides'][s]['others']:.0f}" for s in sides])
        warm = r["sides"].get("compile", {}).get("warmup_s")
        runs.append(f"{ms} ({oth})" + ("" if warm is None else f" [{warm:.1f} s]"))
    print(f"- {key[1]}, {key[0]} thread(s): " + ", ".join(runs))
EOF
exit 0
