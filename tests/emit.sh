# tests/emit.sh — netc's inspection outputs: --emit=c|cuda|ir|dot|summary
# give the same bytes for the same input, the IR shows the graph, the
# fusion groups and the memory plan, dot renders, and the #line directives
# of generated C (with CUDA too: its host passes) send every line of a
# layer's passes to that layer's model line and every other line to the
# output's own.  The kernel source has none: NVRTC and nvcc name its own
# lines, and the kernel.  Building: the same model gives the same program
# wherever TMPDIR is; a compiler's failure is told for what it is (fake
# compilers); SIGINT or SIGTERM during a build leaves nothing behind; a
# device the program will refuse is a warning.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

models="$SRC/models/*.net $SRC/tests/gradcheck/*.net"

# the presumed "file:line" of every line of a C or CUDA file, as a
# compiler reads its #line directives, checked against the rules above
# (blank lines and one-line comments hold no code and may be anywhere):
# prints the first line that breaks one, nothing when all hold
check_lines() { # FILE OUT_NAME MODEL_NAME LOSS_LINE
    awk -v out="$2" -v model="$3" -v loss="$4" '
        BEGIN { file = out; next_line = 1 }
        /^[ \t]*#line [0-9]+ "/ {
            n = $2; f = $3; gsub(/"/, "", f)
            file = f; next_line = n; next
        }
        /^ \* layer [0-9]+: .*\(line [0-9]+\)$/ {
            layer = $NF; sub(/\)$/, "", layer)
        }
        {
            at = next_line++
            if (file == out && at != NR) { print NR ": presumed " file ":" at; exit }
            code = $0 !~ /^[ \t]*$/ && $0 !~ /^[ \t]*\/\*.*\*\/$/
            if (file == model && code && at != layer && at != loss) {
                print NR ": presumed " file ":" at ", the layer is at line " layer; exit
            }
            if (file != out && file != model) { print NR ": presumed " file; exit }
        }' "$1"
}

for model in $models; do
    name=$(basename "$model" .net)
    # the name generated code gives the model: as written, or its base name
    # when absolute (output does not depend on where the tree lives)
    case $model in /*) cited=$name.net ;; *) cited=$model ;; esac
    # cuc: the C file with CUDA's host passes and kernel source in it
    for kind in c cuc cuda ir dot summary; do
        [ $kind = cuc ] && [ "${NETC_HAVE_CUDA:-no}" != yes ] && continue
        emit_kind=$kind cuda_env=no
        [ $kind = cuc ] && emit_kind=c cuda_env=yes
        check "NETC_CUDA=$cuda_env '$NETC' --emit=$emit_kind '$model' -o '$WORK/$name.$kind'" \
            "$name: --emit=$kind failed"
        # twice to stdout, from two directories with two TMPDIRs
        NETC_CUDA=$cuda_env "$NETC" --emit=$emit_kind "$model" > "$WORK/$name.once.$kind"
        (cd "$WORK" && TMPDIR="$WORK" NETC_CUDA=$cuda_env "$NETC" --emit=$emit_kind "$model" \
            > "$WORK/$name.again.$kind")
        check "cmp -s '$WORK/$name.once.$kind' '$WORK/$name.again.$kind'" \
            "$name: --emit=$kind differs between two runs"
    done
    check "! grep -q '#line' '$WORK/$name.cuda'" "$name: a #line in the kernel source"
    "$NETC" --check "$model" > "$WORK/$name.check"
    check "cmp -s '$WORK/$name.check' '$WORK/$name.summary'" "$name: --emit=summary is not --check's summary"

    loss=$(grep -n '^[[:space:]]*loss[[:space:]]' "$model" | head -1 | cut -d: -f1)
    for kind in c cuc; do
        [ -e "$WORK/$name.$kind" ] || continue
        cuda_env=no
        [ $kind = cuc ] && cuda_env=yes
        bad=$(check_lines "$WORK/$name.$kind" "$WORK/$name.$kind" "$cited" "$loss")
        check "[ -z '$bad' ]" "$name: --emit=$kind: a #line is wrong: $bad"
        n=$(grep -c '#line' "$WORK/$name.$kind")
        check "[ $n -gt 0 ]" "$name: --emit=$kind has no #line directive"
        NETC_CUDA=$cuda_env "$NETC" --emit=c --no-line "$model" -o "$WORK/$name.noline.$kind"
        check "! grep -q '#line' '$WORK/$name.noline.$kind'" "$name: --no-line left a #line in --emit=$kind"
        # without the directives, the same code
        grep -v '^[[:space:]]*#line ' "$WORK/$name.$kind" > "$WORK/$name.stripped.$kind"
        check "cmp -s '$WORK/$name.stripped.$kind' '$WORK/$name.noline.$kind'" \
            "$name: --emit=$kind with and without --no-line differ in more than #line"
    done
    # to stdout, #line names "<stdout>"
    bad=$(check_lines "$WORK/$name.once.c" "<stdout>" "$cited" "$loss")
    check "[ -z '$bad' ]" "$name: --emit=c to stdout: a #line is wrong: $bad"

    if command -v dot > /dev/null 2>&1; then
        check "dot -Tsvg '$WORK/$name.dot' -o '$WORK/$name.svg' 2> '$WORK/dot.err' && [ -s '$WORK/$name.svg' ]" \
            "$name: dot cannot render --emit=dot: $(cat "$WORK/dot.err" 2>/dev/null)"
    fi
done
command -v dot > /dev/null 2>&1 || echo "note: graphviz's dot not found; --emit=dot not rendered"

# the IR of digits_cnn: its relus run after their max pools (reorder.c)
ir=$WORK/digits_cnn.ir
check "grep -q '^  %3 \[16, 4, 4\] cn lowp  *= relu %2$' '$ir' &&
    grep -q 'layer 1, line 7, g2; run after the max pool, layer 2 (reorder.c)$' '$ir'" \
    "IR: relu 1 after maxpool2d 2: $(grep -A1 '= relu' "$ir" | head -2)"
# and as written (NETC_REORDER=no): values with shapes, fusion groups, the
# memory plan
ir=$WORK/digits_cnn.written.ir
NETC_REORDER=no "$NETC" --emit=ir "$SRC/models/digits_cnn.net" -o "$ir"
check "grep -q '^  %1 \[16, 8, 8\] cn lowp  *= conv2d(16, kernel=3, padding=1) %0$' '$ir'" "IR: conv2d's value"
check "grep -q '^  %0 \[1, 8, 8\]  *image' '$ir'" "IR: the input is not lowp (fp32 until a product casts it)"
check "grep -q 'layer 1, line 7, g0, in its epilogue' '$ir'" "IR: relu fused into g0"
check "grep -q '^  g0   conv2d 0 + relu 1  *conv2d_0_fwd, conv2d_0_bwd$' '$ir'" "IR: fusion group g0"
check "grep -q 'g5   linear 7     d%9 through relu 8 -> d%7, d7.weight, d7.bias' '$ir'" "IR: a backward pass"
check "grep -q '^  activations  2414 on the cpu (on a GPU 2122' '$ir'" "IR: activation sizes"
check "grep -q '^    %3  *none: read by the next pass alone' '$ir' && grep -q '^    %4  *\[1024, 1536)$' '$ir'" \
    "IR: a value only the next pass reads has no memory of its own on the cpu; one a backward pass reads does"
check "grep -q '^  in 16 bits   1628 ' '$ir' && grep -q '^    %4  *\[512, 768) 16 bits$' '$ir'" \
    "IR: the 16-bit plan"
check "grep -q '^    layer 0 xp  *\[1002, 1052) cpu only, 16 bits (made in backward.s x)$' '$ir' &&
    grep -q '^    layer 3 xp  *\[1052, 1628) cpu only$' '$ir'" \
    "IR: the 16-bit plan keeps the small padded input in 16 bits, not the large one (backward's x would grow more than its half saves)"
check "grep -q '^    %2  *shares %1.s memory (fused)$' '$ir'" "IR: memory reuse of a fused value"
check "grep -q '^  gradients    2 buffers of 1024' '$ir'" "IR: gradient buffers"
check "grep -q '^    layer 0 xp  *\[1738, 1838) cpu only$' '$ir'" "IR: a cpu-only saved tensor"

# A bf16 run rounds each bf16 value once: after the pass that makes it, or
# in it (a product's, in its epilogue: its sum, then a fused activation's
# value unless the activation keeps the rounding), but not after a relu, a
# max pool or a flatten, whose outputs are their input's values (and
# zeros); nor their gradients, but for a max pool whose windows overlap,
# where two add up.  The pass after each call, on the cpu and the GPU: a
# rounding or not; and inside the cpu's passes of the products, the
# roundings of the sum and of a fused tanh, not of a fused relu's gradient.
cat > "$WORK/stem.net" <<'MODEL'
model stem {
    input  image[2, 8, 8]
    target class(4)
    conv2d(4, kernel=3, padding=1)
    batchnorm2d
    relu
    maxpool2d(3, stride=2, padding=1)
    maxpool2d(2)
    conv2d(4, kernel=1)
    relu
    flatten
    linear(4)
    tanh
    loss cross_entropy
    optimizer sgd
}
MODEL
"$NETC" --emit=c --no-line "$WORK/stem.net" -o "$WORK/stem.c" > "$WORK/stem.err" 2>&1
check "[ $? -eq 0 ]" "stem: --emit=c failed: $(cat "$WORK/stem.err")"
# rounds_after PASS: "R C": of PASS's C calls (cpu, and GPU where built
# with CUDA), how many a rounding follows (in a run keeping its values in
# 16 bits, one with their keeping)
rounds_after() {
    awk -v pass="$1" 'after { r += /if \(net->lowp\)|half_round_keep\(/; after = 0 }
        $0 ~ "^ *(TRY\\(cu_)?" pass "\\(net, n," { after = 1; c++ }
        END { print r + 0, c + 0 }' "$WORK/stem.c"
}
for pass in batchnorm2d_1_fwd batchnorm2d_1_bwd maxpool2d_3_bwd conv2d_5_bwd; do
    set -- $(rounds_after $pass)
    check "[ $2 -gt 0 ] && [ $1 -eq $2 ]" "stem: $pass: $1 of its $2 calls rounded after it, not all"
done
for pass in conv2d_0_fwd relu_2_fwd maxpool2d_3_fwd maxpool2d_4_fwd conv2d_5_fwd linear_8_fwd \
    relu_2_bwd maxpool2d_4_bwd flatten_7_bwd; do
    set -- $(rounds_after $pass)
    check "[ $2 -gt 0 ] && [ $1 -eq 0 ]" "stem: $pass: $1 of its $2 calls rounded after it, though its values are rounded"
done
# the roundings in PASS's cpu function
rounds_in() { sed -n "/^NRT_PASS static void $1(/,/^}/p" "$WORK/stem.c" | grep -c 'nrt_round_lowp(net->lowp, '; }
check "[ $(rounds_in conv2d_0_fwd) -eq 1 ]" "stem: conv2d_0_fwd does not round its sum once"
check "[ $(rounds_in conv2d_5_fwd) -eq 1 ]" "stem: conv2d_5_fwd does not round its sum once (before the relu)"
check "[ $(rounds_in linear_8_fwd) -eq 2 ]" "stem: linear_8_fwd does not round its sum and its tanh's value"
check "[ $(rounds_in conv2d_5_bwd) -eq 0 ]" "stem: conv2d_5_bwd rounds its fused relu's gradient, rounded already"
check "[ $(rounds_in linear_8_bwd) -eq 1 ]" "stem: linear_8_bwd does not round its fused tanh's gradient"

# debuggers: a layer's pass is at its model line (DWARF 4, which every
# addr2line reads)
if command -v addr2line > /dev/null 2>&1 && command -v nm > /dev/null 2>&1; then
    cp "$SRC/models/digits_cnn.net" "$WORK/dc.net"
    (cd "$WORK" && NETC_CUDA=no NETC_CFLAGS="-O0 -g -gdwarf-4" "$NETC" dc.net -o dc)
    addr=$(nm "$WORK/dc" | awk '$3 == "conv2d_3_bwd" { print $1 }')
    where=$(addr2line -e "$WORK/dc" "0x$addr" 2>/dev/null)
    check "[ \"\${where##*/}\" = dc.net:9 ]" "conv2d_3_bwd is at '$where', not dc.net:9"
fi

# make dependencies (-MD -MF -MP -MT), for a program and a library; make
# reads them: the program is up to date, then not once the model changes
cp "$SRC/models/digits_mlp.net" "$WORK/my model.net"
(cd "$WORK" && NETC_CUDA=no "$NETC" -MD -MP "my model.net" -o prog)
line1=$(sed -n 1p "$WORK/prog.d")
line2=$(sed -n 2p "$WORK/prog.d")
check '[ -x "$WORK/prog" ] && [ "$line1" = "prog: \\" ] && [ "$line2" = " my\\ model.net \\" ]' \
    "-MD: prog.d: $(cat "$WORK/prog.d" 2>/dev/null)"
check "grep -q '/libnetrt.a' '$WORK/prog.d' && grep -qx 'my. model.net:' '$WORK/prog.d'" \
    "-MD -MP: prog.d lacks the runtime or the phony targets"
printf 'prog:\n\t@echo rebuild\n-include prog.d\n' > "$WORK/Makefile"
if command -v make > /dev/null 2>&1; then
    check "(cd '$WORK' && make -q prog)" "make thinks the program is out of date"
    touch -d '2000-01-01' "$WORK/prog"
    check "! (cd '$WORK' && make -q prog)" "make thinks the program is up to date after the model changed"
fi
(cd "$WORK" && "$NETC" --emit=lib --no-cuda -MF lib.deps "my model.net" -o lib)
check "head -1 '$WORK/lib.deps' | grep -q '^lib.h lib.c:'" "--emit=lib -MF: $(cat "$WORK/lib.deps" 2>/dev/null)"
"$NETC" --emit=ir -MF "$WORK/ir.d" -MT graph.txt "$WORK/my model.net" > /dev/null
check "head -1 '$WORK/ir.d' | grep -q '^graph.txt:'" "-MT: $(cat "$WORK/ir.d" 2>/dev/null)"
(cd "$WORK" && "$NETC" --emit=ir "my model.net" -o - > ir.out)
check "[ \$? -eq 0 ] && grep -q '^; netc' '$WORK/ir.out' && [ ! -e '$WORK/-' ]" \
    "--emit=ir -o -: not to stdout (or a file named -)"
"$NETC" --emit=c -MD "$WORK/my model.net" > /dev/null 2> "$WORK/err"
check "[ $? -eq 2 ] && grep -q 'MD needs an output file' '$WORK/err'" "-MD to stdout: $(cat "$WORK/err")"
# no dependencies for a failed compilation
printf 'model bad {\n    input x[3]\n    linear(0)\n}\n' > "$WORK/bad.net"
(cd "$WORK" && "$NETC" -MD bad.net -o bad 2> /dev/null)
check "[ ! -e '$WORK/bad.d' ] && [ ! -e '$WORK/bad' ]" "a bad model left bad.d or bad behind"

# ---------------------------------------------------------------- building

# the same model and flags give the same program, whatever TMPDIR is, and
# leave nothing in it
mkdir "$WORK/t1" "$WORK/t2"
TMPDIR=$WORK/t1 "$NETC" "$SRC/models/digits_mlp.net" -o "$WORK/same1"
TMPDIR=$WORK/t2 "$NETC" "$SRC/models/digits_mlp.net" -o "$WORK/same2"
check "cmp '$WORK/same1' '$WORK/same2'" "two builds of one model differ"
left() { find "$WORK/t1" "$WORK/t2" "$WORK" -mindepth 1 -maxdepth 1 -name '*netc*' | sed 's,.*/,,'; }
check "[ -z \"\$(left)\" ]" "a build left temporary files: $(left)"

# a device the program will refuse is a warning, on the device's line
printf 'model m {\n    input x[3]\n    target class(2)\n    linear(2)\n    loss cross_entropy\n    optimizer sgd\n    device cuda:1\n}\n' \
    > "$WORK/dev.net"
(cd "$WORK" && "$NETC" --no-cuda dev.net -o dev 2> err)
check "[ $? -eq 0 ] && [ -x '$WORK/dev' ] &&
       [ \"\$(sed -n 1p '$WORK/err')\" = 'dev.net:7:12: warning: device cuda:1, but CUDA is off (--no-cuda)' ] &&
       [ \"\$(sed -n 3p '$WORK/err')\" = '      |            ^~~~~~' ]" "device cuda with --no-cuda: $(cat "$WORK/err")"

# a compiler's failure is told for what it is: its own messages, then
# whether they are about the code netc generated (a bug in netc) or not
fake_cc() { # NAME SCRIPT: $WORK/NAME, a C compiler that runs SCRIPT
    printf '#!/bin/sh\n%s\n' "$2" > "$WORK/$1" && chmod +x "$WORK/$1"
}
build_with() { # NAME: netc builds with that compiler; stderr in $WORK/err
    TMPDIR=$WORK/t1 NETC_CC=$WORK/$1 "$NETC" "$SRC/models/digits_mlp.net" -o "$WORK/fail" 2> "$WORK/err"
}
fake_cc ld_full 'echo "/usr/bin/ld: final link failed: No space left on device" >&2; exit 1'
build_with ld_full
check "[ $? -eq 1 ] && grep -q '^/usr/bin/ld: final link failed: No space left on device$' '$WORK/err' &&
       grep -q 'the C compiler failed (exit status 1); its messages above say why' '$WORK/err' &&
       ! grep -q generated '$WORK/err'" "a full disk: $(cat "$WORK/err")"
fake_cc rejects 'for a; do case $a in *.c) src=${a##*/} ;; esac; done
echo "$src:12:5: error: expected expression" >&2; exit 1'
build_with rejects
check "[ $? -eq 1 ] && grep -q 'error: the C compiler rejected the code netc generated' '$WORK/err' &&
       grep -q 'note: this is a bug in netc' '$WORK/err'" "an error in the generated C: $(cat "$WORK/err")"
fake_cc killed 'kill -9 $$'
build_with killed
check "[ $? -eq 1 ] && grep -q 'the C compiler was killed by signal 9' '$WORK/err'" \
    "a killed compiler: $(cat "$WORK/err")"
check "[ -z \"\$(left)\" ]" "a failed build left files: $(left)"

# stopped by a signal while the compiler runs, netc stops it, removes its
# temporary files and dies of the signal (exit status 128 + N).  A
# non-interactive shell starts background jobs with SIGINT ignored, which
# netc then respects: env gives it back.
fake_cc slow "echo \$\$ > '$WORK/cc.pid'; exec sleep 20"
for sig_status in INT:130 TERM:143; do
    sig=${sig_status%:*} want=${sig_status#*:}
    rm -f "$WORK/cc.pid"
    TMPDIR=$WORK/t1 NETC_CC=$WORK/slow env --default-signal=$sig "$NETC" \
        "$SRC/models/digits_mlp.net" -o "$WORK/slow" 2> /dev/null &
    pid=$!
    i=0
    while [ ! -s "$WORK/cc.pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -$sig $pid
    i=0
    while kill -0 $pid 2> /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL $pid 2> /dev/null
    wait $pid
    rc=$?
    check "[ $rc -eq $want ]" "SIG$sig while the compiler runs: exit status $rc, not $want"
    check "[ -z \"\$(left)\" ]" "SIG$sig while the compiler runs left files: $(left)"
    cc=$(cat "$WORK/cc.pid")
    check "! kill -0 $cc 2> /dev/null" "SIG$sig while the compiler runs left it running"
    kill $cc 2> /dev/null
done

# bad kinds are refused
"$NETC" --emit=asm "$SRC/models/digits_cnn.net" > "$WORK/out" 2> "$WORK/err"
check "[ $? -eq 2 ] && grep -q \"unknown output kind 'asm'\" '$WORK/err'" "--emit=asm: $(cat "$WORK/err")"

# an output that is not a regular file is refused, not replaced: netc
# renames its finished temporary over the output (-o /dev/null, run as
# root, once made /dev/null a file); a pipe is not opened either (no hang)
mkfifo "$WORK/fifo"
for out in /dev/null "$WORK/fifo"; do
    for kind in --emit=c --emit=ir ""; do
        "$NETC" $kind "$SRC/models/digits_cnn.net" -o "$out" > "$WORK/out" 2> "$WORK/err"
        check "[ $? -eq 1 ] && grep -qF 'netc: error: $out: not a regular file' '$WORK/err'" \
            "netc $kind -o $out: $(cat "$WORK/err")"
    done
done
check "[ -c /dev/null ] && [ -p '$WORK/fifo' ]" "/dev/null or the pipe was replaced"
finish
