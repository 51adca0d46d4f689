#!/bin/sh
# bench/gemm_libs.sh — the seed models' products (each linear layer's
# forward, dW and dx, at the model's batch, as the generated C calls
# nrt_gemm) through netc's built-in sgemm and through OpenBLAS, BLIS and
# libxsmm where they are installed (Debian: libopenblas-dev, libblis-dev,
# libxsmm-dev), one thread, as a markdown table (bench/gemm_libs.c).
#
# Environment:
#   NETC     the compiler (default: ./netc in the build tree)
#   MODELS   the models (default: the five of issue 20's targets)
#   ISA      avx2: every side capped at AVX2 (NETRT_CPU_ISA=avx2,
#            OPENBLAS_CORETYPE=Haswell, BLIS_ARCH_TYPE=haswell,
#            LIBXSMM_TARGET=hsw); default: each as the cpu is (OpenBLAS's
#            OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which this project's
#            machines may set, unset for it)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${NETC_TOP_BUILDDIR:-$root}
NETC=${NETC:-$build/netc}
MODELS=${MODELS:-"boston_mlp digits_mlp digits_cnn cifar10 cnn101"}
work=$(mktemp -d "${TMPDIR:-/tmp}/netc-gemm-libs.XXXXXX")
trap 'rm -rf "$work"' EXIT

xsmm=""
if [ -f /usr/include/libxsmm.h ] && [ -f /usr/lib/libxsmm.a ]; then
    xsmm="-DHAVE_LIBXSMM /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a -lpthread -lrt"
fi
# shellcheck disable=SC2086 # $xsmm: flags and archives
${CC:-gcc} -std=c11 -O2 -fopenmp -I"$root/runtime" -I"$build" "$here/gemm_libs.c" \
    "$build/runtime/libnetrt.a" $xsmm -ldl -lm -o "$work/gemm_libs" ||
    { echo "gemm_libs.sh: cannot build bench/gemm_libs.c" >&2; exit 1; }

# The libraries: NAME=PATH of each shared library found.
libs=""
for lib in openblas=libopenblas.so.0 blis=libblis.so.4; do
    path=$(ldconfig -p | awk -v f="${lib#*=}" '$1 == f { print $NF; exit }')
    [ -n "$path" ] && libs="$libs ${lib%%=*}=$path"
done

# The products, from the generated C: nrt_gemm(net->dot, TA, TB, M, N, K, ...),
# n being the batch.  A model whose first layer is a linear does not compute
# that layer's dx (nothing wants the input's gradient): its third product
# is left out.
for m in $MODELS; do
    "$NETC" "$root/models/$m.net" --emit=c --no-cuda --no-line -o "$work/$m.c"
    batch=$(sed -n 's/^ *\.batch = \([0-9]*\),.*/\1/p' "$work/$m.c")
    first_linear=0
    grep -q '^NRT_PASS static void linear_0_fwd(' "$work/$m.c" &&
        first_linear=1
    sed -n 's/.*nrt_gemm(net->dot, \([01]\), \([01]\), \([0-9n]*\), \([0-9n]*\), \([0-9n]*\),.*/\1 \2 \3 \4 \5/p' \
        "$work/$m.c" |
        awk -v m="$m" -v b="$batch" -v skip="$first_linear" '
            { for (i = 3; i <= 5; i++) if ($i == "n") $i = b }
            !(skip && NR == 3) { print m, $0 }'
done > "$work/shapes"

grep -m1 "model name" /proc/cpuinfo 2>/dev/null | sed 's/.*: /cpu: /' || true
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 BLIS_NUM_THREADS=1
# shellcheck disable=SC2086 # $libs: a list of NAME=PATH
if [ "${ISA:-}" = avx2 ]; then
    echo "every side capped at AVX2"
    NETRT_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell BLIS_ARCH_TYPE=haswell LIBXSMM_TARGET=hsw \
        "$work/gemm_libs" $libs < "$work/shapes"
else
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/gemm_libs" $libs < "$work/shapes"
fi
