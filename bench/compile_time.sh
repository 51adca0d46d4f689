#!/bin/bash
# bench/compile_time.sh — how long netc takes to build a program, with the
# CUDA backend ahead of time (nvcc, configure's architectures), for one
# architecture (--cuda-arch=sm_90), with --jit (no nvcc), without CUDA
# (--no-cuda), and a model on device cpu; the median of 3 runs each.
#   OLD=path/to/an/older/netc  also time that one, for a before and after
# usage: bench/compile_time.sh   (NETC: the netc to time, default ./netc)
set -u
NETC=${NETC:-./netc}
OLD=${OLD:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/netc-ctime.XXXXXX")
trap 'rm -rf "$out"' EXIT
# the median of 3 timings of a command, in seconds
t() {
    for _ in 1 2 3; do
        s=$(date +%s%N)
        "$@" > /dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
        e=$(date +%s%N)
        echo $(((e - s) / 1000000))
    done | sort -n | sed -n 2p | awk '{ printf "%.2f", $1 / 1000 }'
}
echo "| model | ${OLD:+before | }ahead of time | --cuda-arch=sm_90 | --jit | --no-cuda |"
echo "|---|${OLD:+---:|}---:|---:|---:|---:|"
for m in boston_mlp digits_mlp digits_cnn cifar10; do
    f=$root/models/$m.net
    before=
    [ -n "$OLD" ] && before="$(t "$OLD" "$f" -o "$out/old") | "
    echo "| $m | $before$(t "$NETC" "$f" -o "$out/p") | $(t "$NETC" --cuda-arch=sm_90 "$f" -o "$out/p") | $(t "$NETC" --jit "$f" -o "$out/p") | $(t "$NETC" --no-cuda "$f" -o "$out/p") |"
done
x=$root/examples/make/xor.net
before=
[ -n "$OLD" ] && before="$(t "$OLD" "$x" -o "$out/old") | "
echo "| xor (device cpu) | $before$(t "$NETC" "$x" -o "$out/p") | — | — | $(t "$NETC" --no-cuda "$x" -o "$out/p") |"
