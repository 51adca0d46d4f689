#!/bin/sh
# bench/conv_libs.sh — builds bench/conv_libs.c against the build tree's
# runtime and oneDNN (Debian: apt-get install libdnnl-dev) and runs it:
# the seed models' convolutions, netc's against oneDNN's, as a markdown
# table.  OMP_NUM_THREADS sets the threads of both (default 1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${NETC_TOP_BUILDDIR:-$root}
out=${TMPDIR:-/tmp}/netc-conv-libs.$$
trap 'rm -f "$out"' EXIT
${CC:-gcc} -std=c11 -O2 -fopenmp -I"$root/runtime" -I"$build" "$here/conv_libs.c" \
    "$build/runtime/libnetrt.a" -ldnnl -lm -o "$out" ||
    { echo "conv_libs.sh: cannot build (is libdnnl-dev installed?)" >&2; exit 1; }
grep -m1 "model name" /proc/cpuinfo 2>/dev/null | sed 's/.*: /cpu: /' || true
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$out"
