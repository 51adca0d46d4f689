#!/bin/bash
# bench/torch_env.sh — the virtual environment with today's PyTorch that
# bench/run.sh measures against: made with `python3 -m venv` if it is not
# there yet, torch 2.x installed into it from PyPI with pip, as a user gets
# it with `pip install torch`.  Prints the environment's python on stdout
# (everything else goes to stderr) and exits 0; exits 1 with a message if
# the environment cannot be made.
#
# PyPI's Linux x86-64 torch wheel is the CUDA build: pip brings in the
# nvidia-* libraries (cuBLAS, cuDNN, NCCL, ...) and triton with it, several
# GB, none of which runs on the CPU.  They are installed all the same: PyPI
# has no CPU-only wheel, and the wheel's torch does not import without them
# (pip install --no-deps torch: "libcufile.so.0: cannot open shared object
# file"); it is also what users of `pip install torch` run.
# numpy comes too, as it does on nearly every machine with torch (without
# it torch warns at every start).  See bench/README.md for size and time.
#
# Environment:
#   NETC_BENCH_VENV         where (default: ~/.cache/netc-bench/torch2)
#   NETC_BENCH_TORCH        what pip installs (default: "torch>=2"; a pin
#                           such as "torch==2.5.1" to measure another)
#   NETC_BENCH_VENV_PYTHON  the Python that makes the venv (default: python3)
#   NETC_BENCH_INSTALL_TIMEOUT  seconds pip may take (default: 3600)
set -euo pipefail

venv=${NETC_BENCH_VENV:-$HOME/.cache/netc-bench/torch2}
spec=${NETC_BENCH_TORCH:-torch>=2}
base=${NETC_BENCH_VENV_PYTHON:-python3}
limit=${NETC_BENCH_INSTALL_TIMEOUT:-3600}
py=$venv/bin/python

fail() {
    echo "torch_env.sh: $*" >&2
    exit 1
}

# Made already: made for this NETC_BENCH_TORCH (the file $mark says which),
# and torch 2.x and numpy import.  An environment a failed install left
# behind, or one made for another torch, does not pass: pip is run into it
# again.  One that passes is used as it is, never upgraded.
mark=$venv/netc-bench-torch
ready() {
    [ "$(cat "$mark" 2>/dev/null)" = "$spec" ] &&
        "$py" -c 'import sys, numpy, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' \
            2>/dev/null
}

if [ -x "$py" ] && ready; then
    echo "$py"
    exit 0
fi

echo "torch_env.sh: making $venv with $spec from PyPI (several GB, minutes)" >&2
start=$(date +%s)
if [ ! -x "$py" ]; then
    mkdir -p "$(dirname "$venv")" || fail "cannot make $(dirname "$venv")"
    "$base" -m venv "$venv" ||
        fail "'$base -m venv $venv' failed (set NETC_BENCH_VENV_PYTHON to a Python with venv)"
fi
# --no-input: a registry that asks for credentials fails instead of waiting.
timeout "$limit" "$py" -m pip install --no-input "$spec" numpy >&2 ||
    fail "pip could not install '$spec' into $venv (see pip's message above)"
echo "$spec" >"$mark"
ready || fail "$py cannot import torch 2.x after the install"
echo "torch_env.sh: made in $(($(date +%s) - start)) s; $(du -sh "$venv" | cut -f1) in $venv" >&2
echo "$py"
