#!/usr/bin/env python3
"""bench/precision.py — step time and peak memory of the generated cpu
programs in fp32, bf16 (both ways of running its products) and fp16, in the
same run on the same machine.

A benchmark, not a test: it builds the programs with the given netc, prints
a markdown table and exits 0 whatever the figures are.

    python3 bench/precision.py [--netc ./netc] [--threads 1] [--repeat 3]
                               [--models digits_cnn cifar10 cnn101 airline_rnn]

Each model trains the epochs below, from the same seed, in each precision;
a run's step time is the median, over its epochs after the first (warm-up),
of the epoch's seconds (the --metrics record's samples / samples_per_sec)
over its steps; the table shows the median of --repeat runs, the runs of
one model interleaved (fp32, bf16, ..., fp32, bf16, ...).  Peak memory is
the process's peak resident set (getrusage of the child): activations,
weights, the optimizer's state and the data set together.  bf16's products
run on AMX's tiles (NETRT_CPU_BF16=amx), as AVX512-BF16's pairs
(avx512bf16), each where the cpu has it, else the next, or as fp32
multiply-adds of the bf16 values (fp32); auto, the default, picks by the
cpu (runtime/backend.c), and each column says what ran.  The values
between layers are kept in 16 bits where that takes less memory
(NETRT_ACT_BITS=auto, the default), or always (16) or never (32): the
last two columns.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# model: epochs per run
EPOCHS = {"digits_cnn": 4, "cifar10": 4, "cnn101": 4, "airline_rnn": 40, "digits_resnet": 4,
          "resnet20": 3}

# One run under a fresh interpreter, which prints its exit status, output and
# peak resident memory (getrusage's RUSAGE_CHILDREN: the largest child's).
RUN_ONE = ("import json, resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
           "print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr,\n"
           "  'kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")

CONFIGS = [  # (column, --precision, the environment's NETRT_CPU_BF16 and NETRT_ACT_BITS)
    ("fp32", "fp32", {}),
    ("bf16", "bf16", {}),
    ("bf16 amx", "bf16", {"NETRT_CPU_BF16": "amx"}),
    ("bf16 avx512bf16", "bf16", {"NETRT_CPU_BF16": "avx512bf16"}),
    ("bf16 fp32", "bf16", {"NETRT_CPU_BF16": "fp32"}),
    ("fp16", "fp16", {}),
    ("bf16 16-bit values", "bf16", {"NETRT_ACT_BITS": "16"}),
    ("bf16 32-bit values", "bf16", {"NETRT_ACT_BITS": "32"}),
]


def cpu_line():
    name, flags = "?", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and name == "?":
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    isa = [f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")]
    return name, isa


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--netc", default=os.path.join(ROOT, "netc"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", nargs="*", default=list(EPOCHS))
    o = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="netc-precision.") as work:
        rows = measure(o, work)
    report(o, rows)


def measure(o, work):
    """{model: {column: [(step ms, peak MiB, the run's precision line)]}}"""
    mk = [sys.executable, os.path.join(HERE, "make_cifar.py")]
    subprocess.run(mk + [f"{work}/c10.bin", "--records", "640", "--classes", "10", "--seed", "1"],
                   check=True)
    subprocess.run(mk + [f"{work}/c101.bin", "--records", "320", "--classes", "101", "--seed", "3"],
                   check=True)
    data = {"cifar10": ["--data", f"{work}/c10.bin", "--test-data", f"{work}/c10.bin"],
            "resnet20": ["--data", f"{work}/c10.bin", "--test-data", f"{work}/c10.bin"],
            "cnn101": ["--data", f"{work}/c101.bin", "--test-data", f"{work}/c101.bin"]}
    rows = {}
    for m in o.models:
        src = os.path.join(ROOT, "models", m + ".net")
        if m == "cnn101":  # the synthetic records instead of the image list, as bench/run.sh
            text = open(src).read().splitlines()
            text = [l.replace('images("', 'cifar10("-") # images("') for l in text
                    if not l.strip().startswith(("transform ", "valid "))]
            src = f"{work}/cnn101.net"
            open(src, "w").write("\n".join(text) + "\n")
        prog = f"{work}/{m}"
        subprocess.run([o.netc, src, "-o", prog], check=True, capture_output=True)
        usage = subprocess.run([prog, "--help"], capture_output=True, text=True).stdout
        batch = int(usage.split("--batch N", 1)[1].split("(default: ", 1)[1].split(")")[0])
        args = ["--threads", str(o.threads), "--epochs", str(EPOCHS[m])] + data.get(m, [])
        for rep in range(o.repeat):
            for col, prec, how in CONFIGS:
                env = dict(os.environ, OMP_NUM_THREADS=str(o.threads))
                env.pop("NETRT_CPU_BF16", None)
                env.pop("NETRT_ACT_BITS", None)
                env.update(how)
                metrics = f"{work}/{m}.jsonl"
                r = subprocess.run([sys.executable, "-c", RUN_ONE, prog, "--device", "cpu",
                                    "--seed", "1", "--precision", prec, "--metrics", metrics]
                                   + args, env=env, cwd=ROOT, capture_output=True, text=True)
                res = json.loads(r.stdout)
                if res["rc"] != 0:
                    sys.exit(f"precision.py: {m} {col}: {res['err'].strip()}")
                recs = [json.loads(l) for l in open(metrics) if l.startswith('{"epoch"')]
                ntrain = int(next(l for l in res["out"].splitlines() if l.startswith("model "))
                             .split("; ")[1].split()[0])
                secs = [ntrain / x["samples_per_sec"] for x in recs[1:]]
                steps = -(-ntrain // batch)
                line = next((l for l in res["out"].splitlines() if l.startswith("precision ")), "")
                rows.setdefault(m, {}).setdefault(col, []).append(
                    (1e3 * statistics.median(secs) / steps, res["kib"] / 1024, line))
    return rows


def report(o, rows):
    name, isa = cpu_line()
    print(f"cpu: {name}, {os.cpu_count()} CPUs; {' '.join(isa)}; {o.threads} thread(s), "
          f"median of {o.repeat} runs")
    print()
    print("| model | " + " | ".join(c for c, _, _ in CONFIGS) + " |")
    print("|---|" + "---:|" * len(CONFIGS))
    for m, cols in rows.items():
        cells = []
        for c, _, _ in CONFIGS:
            ms = statistics.median(x[0] for x in cols[c])
            mib = statistics.median(x[1] for x in cols[c])
            ratio = "" if c == "fp32" else \
                f" ({statistics.median(x[0] for x in cols['fp32']) / ms:.2f}x)"
            cells.append(f"{ms:.3g} ms{ratio}, {mib:.0f} MiB")
        print(f"| {m} | " + " | ".join(cells) + " |")
    print()
    print("Step time in ms (in brackets: fp32's step time over this one's, > 1 faster than "
          "fp32), and the process's peak resident memory.  How each bf16 column ran its "
          "products:")
    for c, _, _ in CONFIGS[1:5]:
        lines = {x[2] for cols in rows.values() for x in cols[c]}
        print(f"- {c}: " + "; ".join(sorted(l for l in lines if l)))


if __name__ == "__main__":
    main()
