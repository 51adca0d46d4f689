# tests/isa.sh — the cpu gives the same bits on AVX2 as on AVX-512, and
# the generated passes' AVX2 clone the same as their baseline's (below):
# tests/gpu/parity.sh with DEVICE=cpu-avx2 (a run against the same run
# under NETRT_CPU_ISA=avx2, every step's loss equal) over every
# models/*.net and every tests/gradcheck model, in file order and
# shuffled, in fp32 and bf16 (fp16's products are bf16's: fp32
# multiply-adds of rounded values), each on a few dozen samples and
# batches of 16 (an epoch's last batch partial).  The built-in kernels'
# products: AVX-512's and AVX2's micro-kernels and the convolutions' dW
# read in place, which sum in one order (oneDNN's kernels for the two
# sum in orders of their own: NETRT_CPU_CONV=builtin; bf16's products as
# fp32 multiply-adds: NETRT_CPU_BF16=fp32).  On a cpu without AVX-512,
# where both runs would be the same AVX2, the runtime built with its
# AVX-512 code emulated (tests/avx512emu/libnetrt.a) on six models.
# First, the variable's own checks, and NETRT_CPU_CONV's.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
. "$SRC/tests/gradcheck/data.sh"

# the variable's values: avx2, auto; anything else stops the run, saying so
compile "$SRC/models/digits_mlp.net" "$WORK/dm"
(cd "$SRC" && NETRT_CPU_ISA=avx3 "$WORK/dm" --max-steps 1) > "$WORK/bad.out" 2>&1
check "[ $? -eq 1 ] && grep -q \"error: NETRT_CPU_ISA is 'avx3': auto or avx2\" '$WORK/bad.out'" \
    "NETRT_CPU_ISA=avx3: $(cat "$WORK/bad.out")"
(cd "$SRC" && NETRT_CPU_CONV=winograd "$WORK/dm" --max-steps 1) > "$WORK/bad.out" 2>&1
check "[ $? -eq 1 ] && grep -q \"error: NETRT_CPU_CONV is 'winograd': auto, builtin, direct or onednn\" '$WORK/bad.out'" \
    "NETRT_CPU_CONV=winograd: $(cat "$WORK/bad.out")"
(cd "$SRC" && NETRT_CPU_ISA=avx2 "$WORK/dm" --max-steps 1) > "$WORK/avx2.out" 2>&1
check "[ $? -eq 0 ] && grep -q 'precision fp32: products as fp32 multiply-adds (\(AVX2\|portable\|OpenBLAS\), NETRT_CPU_ISA)' '$WORK/avx2.out'" \
    "NETRT_CPU_ISA=avx2: $(head -3 "$WORK/avx2.out")"

# The generated passes' two clones (NRT_PASS, netrt.h): the AVX2 one the
# cpu picks against the x86-64 baseline's (-DNRT_PASS=), every model and
# tests/gradcheck model in fp32 and bf16, the same bits; on a cpu without
# AVX2 both runs are the baseline's.
gradcheck_data_dir "$WORK/data" 40
for p in fp32 bf16; do
    (cd "$SRC" && DEVICE=cpu-baseline STEPS=10 SAMPLES=75 BATCH=16 PRECISION=$p \
        DATA_DIR="$WORK/data" sh "$SRC/tests/gpu/parity.sh" "$SRC"/models/*.net \
        "$SRC"/tests/gradcheck/*.net) > "$WORK/clones.$p" 2>&1
    check "[ $? -eq 0 ]" "the passes' AVX2 and baseline clones in $p: $(grep -v -e '^ok' -e '^skip' "$WORK/clones.$p")"
    tail -n 1 "$WORK/clones.$p"
done

cd "$SRC" || exit 1 # the models name their data from the source tree
export NETRT_CPU_CONV=builtin NETRT_CPU_BF16=fp32
models="$SRC/models/*.net $SRC/tests/gradcheck/*.net"
if ! grep -q '^flags.* avx512f' /proc/cpuinfo 2> /dev/null; then
    # No AVX-512 here: the runtime whose kernels run it emulated
    # (tests/unit/avx512_emu.h: the AVX-512 and AVX512-BF16 code compiled
    # for AVX2, each instruction's lanes in C), where make built it and
    # the cpu has AVX2 and FMA, on six models: the products of linear and
    # convolution layers, Winograd's (not on every model: emulated, the
    # whole list takes minutes; the kernels for planes 16 wide or more,
    # the first layer's direct tiles and the 2x2 pools, are
    # test_kernels_avx512emu's)
    emu="$BUILD/tests/avx512emu/libnetrt.a"
    if [ ! -f "$emu" ] || ! grep -q '^flags.* avx2' /proc/cpuinfo 2> /dev/null ||
        ! grep -q '^flags.* fma' /proc/cpuinfo 2> /dev/null; then
        echo "no AVX-512 here, emulated or not: no AVX2 to compare it with"
        finish
    fi
    mkdir "$WORK/emulib" && ln -s "$emu" "$WORK/emulib/libnetrt.a" || exit 1
    for l in libnetrt_cuda.a libnetrt_mpi.a; do
        [ ! -f "$BUILD/runtime/$l" ] || ln -s "$BUILD/runtime/$l" "$WORK/emulib/$l"
    done
    export NETC_LIB_DIR="$WORK/emulib"
    models="$SRC/models/digits_cnn.net $SRC/models/digits_mlp.net"
    for m in conv_paths conv_stride_pad maxpool_ties winograd; do
        models="$models $SRC/tests/gradcheck/$m.net"
    done
    echo "AVX-512 emulated ($emu)"
fi
for p in fp32 bf16; do
    # shellcheck disable=SC2086 # $models: a list of paths
    DEVICE=cpu-avx2 STEPS=10 SAMPLES=75 BATCH=16 PRECISION=$p DATA_DIR="$WORK/data" \
        sh "$SRC/tests/gpu/parity.sh" $models > "$WORK/isa.$p" 2>&1
    check "[ $? -eq 0 ]" "AVX-512 and AVX2 in $p: $(grep -v -e '^ok' -e '^skip' "$WORK/isa.$p")"
    tail -n 1 "$WORK/isa.$p"
done
finish
