# tests/cuda.sh — the CUDA backend where no GPU is needed: every model under
# models/ (and the gradient-check models) emits a kernel source that nvcc
# compiles for the first configured architecture without a warning, and that
# the JIT (a program built with --jit, asked for sm_90 with --jit-arch)
# compiles with NVRTC to a cubin; the JIT's disk cache hits, rebuilds a
# truncated entry, costs only itself when read-only, and is found where
# the environment says; a program built with the backend (ahead of time)
# links no CUDA library (the runtime statically; cuBLAS and NVRTC are
# loaded when needed), lists devices, and without a GPU falls back to the
# cpu under --device auto and refuses --device cuda with one clear
# sentence; a model whose device is cpu gets no kernels at all.  Ahead of
# time nvcc and the C compiler run at once: the program is the same
# whatever TMPDIR is, a failure of either is reported as its own and
# stops the other, and a failure or a stop signal leaves nothing behind.
# Skipped (77) when netc was configured without CUDA.  The GPU checks
# themselves are tests/gpu/run.sh.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

[ "${NETC_HAVE_CUDA:-no}" = yes ] || skip "netc was configured without CUDA"
unset NETC_CUDA
NVCC=${NVCC:-nvcc}
export NETC_CACHE_DIR="$WORK/cache"

# (not resnet20: its kernels are digits_resnet's and tests/gradcheck/
# blocks.net's, 73 layers of them, a minute of nvcc for three archs and as
# much of NVRTC; tests/emu_suite.sh builds and trains it on the emulated
# device)
#
# Each model's source goes through nvcc for the first configured
# architecture only (8 of its 16 s for cifar10, on a Zen 3): the kernels'
# code differs by architecture at sm_80 alone (below it and from it on),
# the side NVRTC's sm_90 compile of the same source takes next; each
# further architecture costs as much again (cicc and ptxas), and the
# programs built ahead of time below, like the runtime's own kernels, take
# the whole list.
first_arch=$(echo "$NETRT_CUDA_GENCODE" | awk '{ print $1 }')
for model in $(ls "$SRC"/models/*.net | grep -v '/resnet20\.net$') "$SRC"/tests/gradcheck/*.net; do
    name=$(basename "$model" .net)
    check "'$NETC' --emit=cuda '$model' -o '$WORK/$name.cu'" "$name: --emit=cuda failed"
    # shellcheck disable=SC2086
    "$NVCC" -std=c++17 -O3 -fatbin $first_arch -I"$SRC/runtime" -I"$SRC/runtime/cuda" -I"$SRC/templates" \
        "$WORK/$name.cu" -o "$WORK/$name.fatbin" > "$WORK/$name.log" 2>&1
    check "[ $? -eq 0 ]" "$name: nvcc failed on the kernel source: $(head -20 "$WORK/$name.log")"
    check "! grep -qi 'warning' '$WORK/$name.log'" "$name: nvcc warns: $(grep -i -m3 warning "$WORK/$name.log")"
    # the JIT: NVRTC compiles the same source for sm_90
    check "'$NETC' --jit '$model' -o '$WORK/$name.jit'" "$name: netc --jit failed"
    "$WORK/$name.jit" --jit-arch sm_90 > "$WORK/$name.jitinfo" 2>&1
    check "[ $? -eq 0 ] && grep -q '^compiled: *at run time by NVRTC .* for sm_90 (cubin' '$WORK/$name.jitinfo'" \
        "$name: NVRTC did not compile the kernels for sm_90: $(head -5 "$WORK/$name.jitinfo")"
    check "grep -q '^cache: *miss' '$WORK/$name.jitinfo'" "$name: the first compile is not a miss"
done

# The cache, with digits_cnn's JIT program.
prog=$WORK/digits_cnn.jit
entry=$(sed -n 's/^cache entry: *//p' "$WORK/digits_cnn.jitinfo")
check "[ -f '$entry' ] && [ \"\$(dirname '$entry')\" = '$NETC_CACHE_DIR' ]" \
    "the cache entry '$entry' is not in \$NETC_CACHE_DIR"
"$prog" --jit-arch sm_90 > "$WORK/hit.out" 2>&1
check "grep -q '^cache: *hit' '$WORK/hit.out' && grep -q '^compile time: *0.000 s' '$WORK/hit.out'" \
    "the second run does not hit the cache: $(cat "$WORK/hit.out")"
check "grep -q \"^cache entry: *$entry\\\$\" '$WORK/hit.out'" "the second run names another entry"
"$prog" --jit-arch sm_80 > "$WORK/other.out" 2>&1
check "grep -q '^cache: *miss' '$WORK/other.out'" "another architecture hits the sm_90 entry"
# a truncated entry is rebuilt, then hit
head -c 1000 "$entry" > "$WORK/short" && cat "$WORK/short" > "$entry"
"$prog" --jit-arch sm_90 > "$WORK/trunc.out" 2>&1
check "[ $? -eq 0 ] && grep -q 'corrupt cache entry.*rebuilt' '$WORK/trunc.out'" \
    "a truncated entry is not said to be rebuilt: $(cat "$WORK/trunc.out")"
"$prog" --jit-arch sm_90 > "$WORK/again.out" 2>&1
check "grep -q '^cache: *hit' '$WORK/again.out'" "the rebuilt entry does not hit"
check "[ -z \"\$(ls '$NETC_CACHE_DIR' | grep -v '\\.cubin\$')\" ]" \
    "the cache directory holds more than entries: $(ls "$NETC_CACHE_DIR")"
# a read-only cache directory costs only the cache (root writes anyway)
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$WORK/ro" && chmod 500 "$WORK/ro"
    NETC_CACHE_DIR=$WORK/ro/netc "$prog" --jit-arch sm_90 > "$WORK/ro.out" 2>&1
    check "[ $? -eq 0 ] && grep -q '^cache: *not used' '$WORK/ro.out' && grep -q '^note:' '$WORK/ro.out'" \
        "a read-only cache directory: $(cat "$WORK/ro.out")"
fi
# a cache directory that cannot exist: a path under a regular file
NETC_CACHE_DIR=$WORK/short/netc "$prog" --jit-arch sm_90 > "$WORK/bad.out" 2>&1
check "[ $? -eq 0 ] && grep -q '^cache: *not used' '$WORK/bad.out' && grep -q '^note:' '$WORK/bad.out'" \
    "an impossible cache directory: $(cat "$WORK/bad.out")"
# where: $NETC_CACHE_DIR, else $XDG_CACHE_HOME/netc, else ~/.cache/netc
(unset NETC_CACHE_DIR; XDG_CACHE_HOME=$WORK/xdg "$prog" --jit-arch sm_90) > "$WORK/xdg.out" 2>&1
check "grep -q \"^cache entry: *$WORK/xdg/netc/\" '$WORK/xdg.out'" "\$XDG_CACHE_HOME: $(cat "$WORK/xdg.out")"
(unset NETC_CACHE_DIR XDG_CACHE_HOME; HOME=$WORK/home "$prog" --jit-arch sm_90) > "$WORK/home.out" 2>&1
check "grep -q \"^cache entry: *$WORK/home/.cache/netc/\" '$WORK/home.out'" "~/.cache: $(cat "$WORK/home.out")"
# no GPU: --jit-info alone says how to ask for an architecture
"$prog" --jit-info > "$WORK/nogpu.out" 2>&1
if [ $? -ne 0 ]; then
    check "grep -q 'no CUDA device.*--jit-arch' '$WORK/nogpu.out'" "--jit-info without a GPU: $(cat "$WORK/nogpu.out")"
fi
"$prog" --jit-arch sm_9x > "$WORK/badarch.out" 2>&1
check "[ $? -eq 1 ] && grep -q 'not an architecture like sm_90' '$WORK/badarch.out'" \
    "--jit-arch sm_9x: $(cat "$WORK/badarch.out")"
# --jit needs CUDA
NETC_CUDA=no "$NETC" --jit "$SRC/models/digits_mlp.net" -o "$WORK/nojit" 2> "$WORK/nojit.err"
check "[ $? -eq 1 ] && grep -q 'error: --jit compiles CUDA kernels' '$WORK/nojit.err' && [ ! -e '$WORK/nojit' ]" \
    "--jit with NETC_CUDA=no: $(cat "$WORK/nojit.err")"

# One whole program with the backend, on a machine with or without a GPU.
model=$SRC/models/boston_mlp.net
check "compile '$model' '$WORK/prog'" "boston_mlp: netc -o with CUDA failed"
if [ -x "$WORK/prog" ]; then
    "$WORK/prog" --jit-arch sm_90 > "$WORK/aot.out" 2>&1
    check "grep -q '^compiled: *ahead of time by nvcc' '$WORK/aot.out'" \
        "the program built ahead of time: $(cat "$WORK/aot.out")"
    "$WORK/prog" --list-devices > "$WORK/devices.out" 2>&1
    check "[ $? -eq 0 ] && [ -s '$WORK/devices.out' ]" "--list-devices failed: $(cat "$WORK/devices.out")"
    if grep -q '^no CUDA device' "$WORK/devices.out"; then
        # from the source tree: the model names its data relative to it
        (cd "$SRC" && "$WORK/prog" --device cuda --max-steps 1) > "$WORK/cuda.out" 2> "$WORK/cuda.err"
        check "[ $? -eq 1 ]" "--device cuda without a GPU: exit status not 1"
        check "grep -q 'no CUDA device found' '$WORK/cuda.err'" \
            "--device cuda without a GPU: $(cat "$WORK/cuda.err")"
        check "[ \$(wc -l < '$WORK/cuda.err') -eq 1 ]" "--device cuda without a GPU: more than one line"
        check "(cd '$SRC' && '$WORK/prog' --device auto --epochs 1) > '$WORK/auto.out'" \
            "--device auto without a GPU failed"
        check "grep -q '^device: cpu (auto: no CUDA device found' '$WORK/auto.out'" \
            "--device auto does not say it uses the cpu: $(head -2 "$WORK/auto.out")"
    fi
fi
# --cuda-arch: only the architectures asked for (and the last's PTX)
"$NETC" -v --cuda-arch=sm_90 "$model" -o "$WORK/prog90" > "$WORK/arch.log" 2>&1
check "[ $? -eq 0 ] && grep -q 'code=sm_90 ' '$WORK/arch.log' && grep -q 'code=compute_90 ' '$WORK/arch.log' && ! grep -q 'sm_80' '$WORK/arch.log'" \
    "--cuda-arch=sm_90: $(grep nvcc "$WORK/arch.log")"
"$NETC" --cuda-arch=sm_9x "$model" -o "$WORK/bad" > "$WORK/badarch.log" 2>&1
check "[ $? -eq 2 ] && grep -q \"error: --cuda-arch: 'sm_9x' is not an architecture like sm_90\" '$WORK/badarch.log' && [ ! -e '$WORK/bad' ]" \
    "--cuda-arch=sm_9x: $(cat "$WORK/badarch.log")"
# The assembler includes the fatbin (.incbin), named in the C file as an
# assembler string: a temporary directory with a quote, a backslash and a
# space in its name still works (nvcc's own temporaries cannot, so a
# stand-in nvcc writes a 12345-byte fatbin).
printf '#!/bin/sh\nwhile [ $# -gt 1 ]; do shift; done\nhead -c 12345 /dev/zero > "$1"\n' > "$WORK/fake-nvcc"
chmod +x "$WORK/fake-nvcc"
mkdir -p "$WORK/tmp \"q\\"
TMPDIR="$WORK/tmp \"q\\" NETC_NVCC="$WORK/fake-nvcc" "$NETC" "$model" -o "$WORK/prog_q" > "$WORK/q.log" 2>&1
check "[ $? -eq 0 ] && '$WORK/prog_q' --jit-arch sm_90 2>&1 | grep -q '^compiled: *ahead of time by nvcc (a 12345-byte fatbin)'" \
    "a TMPDIR with a quote, a backslash and a space: $(cat "$WORK/q.log")"
(cd "$SRC" && "$WORK/prog_q" --device cpu --max-steps 2 --quiet)
check "[ $? -eq 0 ]" "the program built in a TMPDIR with a quote does not run"

# Ahead of time, nvcc compiles the kernels while the C compiler compiles
# the host code into an object; then the fatbin's own unit and the link.
# The program is the same whatever TMPDIR is, and nothing is left there.
mkdir -p "$WORK/t1" "$WORK/t2"
TMPDIR=$WORK/t1 "$NETC" -v --cuda-arch=sm_90 "$model" -o "$WORK/same1" > "$WORK/same1.log" 2>&1
check "[ $? -eq 0 ] && grep -q ' -c .*/boston_mlp\.c -o .*/boston_mlp\.o\$' '$WORK/same1.log' &&
       grep -q '/boston_mlp\.o .*/boston_mlp\.fatbin\.c ' '$WORK/same1.log'" \
    "-v does not show the host object and the fatbin's unit: $(cat "$WORK/same1.log")"
TMPDIR=$WORK/t2 "$NETC" --cuda-arch=sm_90 "$model" -o "$WORK/same2"
check "cmp '$WORK/same1' '$WORK/same2'" "two builds of one model with CUDA differ"
left() { find "$WORK/t1" "$WORK/t2" -mindepth 1 | sed 's,.*/,,'; }
check "[ -z \"\$(left)\" ]" "a CUDA build left temporary files: $(left)"
# still running: any process whose command line names a scratch folder
alive() { ps -eo stat=,args= | grep -v '^Z' | grep -F "$WORK/t1/" | grep -v grep; }

# A compiler that fails while the other runs is the one reported; the
# other is stopped, and nothing is left: neither netc's files nor those
# of nvcc stopped, which it does not always remove itself.
printf '#!/bin/sh\nsleep 1\necho "cc1: out of memory allocating 65536 bytes" >&2\nexit 1\n' \
    > "$WORK/cc-fails"
printf '#!/bin/sh\necho $$ > "%s"\nexec sleep 30\n' "$WORK/cc.pid" > "$WORK/cc-slow"
printf '#!/bin/sh\nsleep 1\necho "nvcc: out of memory" >&2\nexit 2\n' > "$WORK/nvcc-fails"
chmod +x "$WORK/cc-fails" "$WORK/cc-slow" "$WORK/nvcc-fails"
big=$SRC/models/digits_cnn.net
TMPDIR=$WORK/t1 NETC_CC=$WORK/cc-fails "$NETC" --cuda-arch=sm_90 "$big" -o "$WORK/fail" 2> "$WORK/err"
check "[ $? -eq 1 ] && grep -q '^cc1: out of memory' '$WORK/err' &&
       grep -q 'error: the C compiler failed (exit status 1); its messages above say why' '$WORK/err' &&
       ! grep -q nvcc '$WORK/err' && [ ! -e '$WORK/fail' ]" \
    "the C compiler failing while nvcc runs: $(cat "$WORK/err")"
check "[ -z \"\$(left)\" ] && [ -z \"\$(alive)\" ]" \
    "the C compiler failing while nvcc runs left files or nvcc: $(left) $(alive)"
rm -f "$WORK/cc.pid"
TMPDIR=$WORK/t1 NETC_CC=$WORK/cc-slow NETC_NVCC=$WORK/nvcc-fails "$NETC" "$big" -o "$WORK/fail" \
    2> "$WORK/err"
check "[ $? -eq 1 ] && grep -q '^nvcc: out of memory' '$WORK/err' &&
       grep -q 'error: nvcc failed (exit status 2); its messages above say why' '$WORK/err' &&
       ! grep -q 'C compiler' '$WORK/err' && [ ! -e '$WORK/fail' ]" \
    "nvcc failing while the C compiler runs: $(cat "$WORK/err")"
check "[ -s '$WORK/cc.pid' ] && ! kill -0 \$(cat '$WORK/cc.pid') 2> /dev/null && [ -z \"\$(left)\" ]" \
    "nvcc failing while the C compiler runs left it running or files: $(left)"

# Stopped by SIGINT or SIGTERM while both run, netc stops both (nvcc, the
# real one, with its cicc and ptxas) and leaves nothing.
if [ -n "$default_signals" ]; then
    for sig_status in INT:130 TERM:143; do
        sig=${sig_status%:*} want=${sig_status#*:}
        rm -f "$WORK/cc.pid"
        TMPDIR=$WORK/t1 NETC_CC=$WORK/cc-slow $default_signals "$NETC" "$big" -o "$WORK/fail" \
            2> /dev/null &
        pid=$!
        i=0
        while [ ! -s "$WORK/cc.pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        sleep 1 # nvcc is into cicc by now
        stop $pid $sig
        rc=$?
        check "[ $rc -eq $want ]" "SIG$sig while both compilers run: exit status $rc, not $want"
        check "[ -z \"\$(left)\" ] && [ -z \"\$(alive)\" ] && ! kill -0 \$(cat '$WORK/cc.pid') 2> /dev/null" \
            "SIG$sig while both compilers run left files or a compiler: $(left) $(alive)"
    done
fi

# No CUDA library is needed to start: none is linked dynamically.
if [ -x "$WORK/prog" ] && command -v readelf > /dev/null 2>&1; then
    readelf -d "$WORK/prog" > "$WORK/dynamic.out" 2>&1
    check "grep -q NEEDED '$WORK/dynamic.out' && ! grep -E 'NEEDED.*lib(cudart|cublas|cublasLt|nvrtc|nccl|cuda)\.' '$WORK/dynamic.out'" \
        "the program links a CUDA library: $(grep NEEDED "$WORK/dynamic.out" | tr -s ' ')"
fi
# device cpu: no kernels, no nvcc
"$NETC" -v "$SRC/examples/make/xor.net" -o "$WORK/xor" > "$WORK/xor.log" 2>&1
check "[ $? -eq 0 ] && ! grep -q nvcc '$WORK/xor.log' && ! grep -q netrt_cuda '$WORK/xor.log'" \
    "a model on device cpu was built with CUDA: $(cat "$WORK/xor.log")"
(cd "$SRC/examples/make" && "$WORK/xor" --device cuda --max-steps 1) > "$WORK/xor.out" 2>&1
check "[ $? -eq 1 ] && grep -q \"built without CUDA (its model's device is cpu\" '$WORK/xor.out'" \
    "--device cuda on a cpu model's program: $(cat "$WORK/xor.out")"
"$NETC" --jit "$SRC/examples/make/xor.net" -o "$WORK/xor.jit" > "$WORK/xorjit.out" 2>&1
check "[ $? -eq 1 ] && grep -q \"error: --jit compiles CUDA kernels, but the model's device is cpu\" '$WORK/xorjit.out'" \
    "--jit on a cpu model: $(cat "$WORK/xorjit.out")"
finish
