# tests/flags.sh — the generated program's flags and its errors: each bad
# flag, bad data file and bad weights file gives one clear message naming
# the thing, exit status non-zero, and no crash.  The running program keeps
# its name, and its OpenMP threads spin briefly, then sleep.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

cat > "$WORK/m.net" <<'NET'
model tiny {
    input  x[3]
    target class(2)
    fc = linear(4)
    relu
    linear(2)
    loss cross_entropy
    optimizer sgd(lr=0.1)
    device cpu
}
NET
compile "$WORK/m.net" "$WORK/p"
p=$WORK/p
printf '0.1,0.2,0.3,1\n0.5,0.1,0.2,0\n0.3,0.3,0.9,1\n' > "$WORK/ok.csv"

# expect_error STDERR_SUBSTRING ARGS...: the program fails with that message
expect_error() {
    want=$1
    shift
    "$p" "$@" > "$WORK/out" 2> "$WORK/err"
    status=$?
    check "[ $status -ne 0 ] && [ $status -lt 128 ]" "'$*': exit status $status"
    check "grep -qF -- \"\$want\" '$WORK/err'" "'$*': expected '$want' in: $(cat "$WORK/err")"
}

expect_error "unknown option '--bogus'" --bogus
expect_error "--batch expects a whole number from 1 to 1048576, got '0'" --batch 0
expect_error "--epochs expects a whole number" --epochs many
expect_error "--lr expects a non-negative number, got '-1'" --lr -1
expect_error "--lr 1e-50 is too small: it would be 0 as a float" --lr 1e-50
expect_error "--lr expects a non-negative number, got '1e-400'" --lr 1e-400
expect_error "--data needs a value" --data
expect_error "--precision expects fp32, bf16 or fp16, got 'bf8'" --precision bf8
expect_error "--loss-scale: the run is in fp32; the loss is scaled in fp16 only" --loss-scale 8
expect_error "--loss-scale expects a positive number a float holds, got '1e39'" --precision fp16 \
    --loss-scale 1e39
expect_error "--loss-scale expects a positive number a float holds, got '0'" --precision fp16 \
    --loss-scale 0
# --gradcheck in bf16 and in fp16 (tests/gradcheck.sh checks every model so):
# three verdicts; fp16's from the first loss scale --loss-scale gives,
# halved until the gradients fit
"$p" --data "$WORK/ok.csv" --gradcheck 2 --precision bf16 > "$WORK/out" 2>&1
check "[ $? -eq 0 ] && [ \$(grep -c ': ok$' '$WORK/out') -eq 3 ]" \
    "--gradcheck 2 --precision bf16: $(cat "$WORK/out")"
"$p" --data "$WORK/ok.csv" --gradcheck 2 --precision fp16 --loss-scale 1e30 > "$WORK/out" 2>&1
check "[ $? -eq 0 ] && [ \$(grep -c ': ok$' '$WORK/out') -eq 3 ] && grep -q 'overflow at the loss scale 1e+30: checked at ' '$WORK/out'" \
    "--gradcheck 2 --precision fp16 --loss-scale 1e30: $(cat "$WORK/out")"
expect_error "--bucket-mb expects a number of MiB above 0, up to 65536, got '0'" --bucket-mb 0
expect_error "--bucket-mb: this program trains in one process (built without netc --mpi)" \
    --bucket-mb 4
expect_error "no training data: the model names none; give --data PATH"
expect_error "this program was built without CUDA (its model's device is cpu, netc --no-cuda, or a netc without CUDA)" --device cuda --data "$WORK/ok.csv"
expect_error "unknown device 'tpu'" --device tpu --data "$WORK/ok.csv"
expect_error "$WORK/none.csv: cannot open" --data "$WORK/none.csv"

printf '0.1,0.2,0.3,1\n0.5,0.1,0\n' > "$WORK/short.csv"
expect_error "$WORK/short.csv:2: expected 4 columns, found 3" --data "$WORK/short.csv"
printf '0.1,0.2,0.3,1\n0.5,abc,0.2,0\n' > "$WORK/nan.csv"
expect_error "$WORK/nan.csv:2:2: not a number: 'abc'" --data "$WORK/nan.csv"
printf '0.1,0.2,0.3,1\n0.5,0.1,0.2,7\n' > "$WORK/label.csv"
expect_error "$WORK/label.csv:2: label 7 out of range [0, 2)" --data "$WORK/label.csv"

# --max-steps 0 --save writes the initial weights without any data, with
# PyTorch's names; a named layer keeps its name
check "'$p' --max-steps 0 --save '$WORK/init.safetensors'" "--max-steps 0 --save failed"
check "grep -q 'fc.weight' '$WORK/init.safetensors' && grep -q '2.bias' '$WORK/init.safetensors'" \
    "the weights file lacks fc.weight or 2.bias"

# weights that do not fit the model are refused, naming the tensor
cat > "$WORK/other.net" <<'NET'
model other {
    input  x[3]
    target class(2)
    fc = linear(5)
    relu
    linear(2)
    loss cross_entropy
    optimizer sgd
}
NET
compile "$WORK/other.net" "$WORK/other"
"$WORK/other" --max-steps 0 --save "$WORK/other.safetensors"
expect_error "tensor 'fc.weight' has shape [5, 3], the model expects [4, 3]" \
    --load "$WORK/other.safetensors" --data "$WORK/ok.csv"
printf 'not a safetensors file' > "$WORK/junk.safetensors"
expect_error "junk.safetensors: not a safetensors file" --load "$WORK/junk.safetensors" --max-steps 0
expect_error "missing.safetensors: No such file or directory" --load "$WORK/missing.safetensors" --max-steps 0

# a failed save leaves no file behind
expect_error "$WORK/no/such/dir/w.safetensors" --max-steps 0 --save "$WORK/no/such/dir/w.safetensors"
check "[ ! -e '$WORK/no' ]" "a failed save left something behind"

# flags override the model's defaults
"$p" --data "$WORK/ok.csv" --epochs 3 --batch 2 --lr 0.5 --metrics "$WORK/m.jsonl" --log-every 1 --quiet
check "[ \$(grep -c '\"epoch\"' '$WORK/m.jsonl') -eq 3 ]" "--epochs 3 did not give 3 epoch records"
check "[ \$(grep -c '\"step\"' '$WORK/m.jsonl') -eq 6 ]" "--batch 2 over 3 samples did not give 2 steps an epoch"
check "grep -q '\"lr\": 0.5' '$WORK/m.jsonl'" "--lr 0.5 is not in the metrics"
"$p" --data "$WORK/ok.csv" --max-steps 4 --epochs 10 --metrics "$WORK/s.jsonl" --log-every 1 --quiet
check "[ \$(grep -c '\"step\"' '$WORK/s.jsonl') -eq 4 ]" "--max-steps 4 did not stop after 4 steps"
"$p" --data "$WORK/ok.csv" --quiet > "$WORK/q.out"
check "[ ! -s '$WORK/q.out' ]" "--quiet printed: $(cat "$WORK/q.out")"

# --load and --resume refuse weights holding NaN or an infinity, naming the
# tensor and where in it (written here by poking one value of a saved file)
poke() { # FILE TENSOR INDEX VALUE: sets one float32 value of a safetensors file
    "$PYTHON" - "$@" <<'PY'
import json, struct, sys
path, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with open(path, "rb") as f:
    raw = bytearray(f.read())
n = struct.unpack("<Q", raw[:8])[0]
at = 8 + n + json.loads(raw[8:8 + n])[name]["data_offsets"][0] + 4 * index
raw[at:at + 4] = struct.pack("<f", value)
with open(path, "wb") as f:
    f.write(raw)
PY
}
if "$PYTHON" -c 'import json, struct' 2> /dev/null; then
    cp "$WORK/init.safetensors" "$WORK/nan.safetensors"
    poke "$WORK/nan.safetensors" fc.weight 7 nan
    expect_error "nan.safetensors: tensor 'fc.weight' holds NaN at [2, 1] (1 non-finite value of 12)" \
        --load "$WORK/nan.safetensors" --data "$WORK/ok.csv"
    cat > "$WORK/mom.net" <<NET
model mom {
    input  x[3]
    target class(2)
    fc = linear(4)
    batchnorm1d
    relu
    linear(2)
    loss cross_entropy
    optimizer sgd(lr=0.1, momentum=0.9)
    device cpu
    train csv("$WORK/ok.csv") batch 2 epochs 2
}
NET
    compile "$WORK/mom.net" "$WORK/mom"
    "$WORK/mom" --max-steps 1 --checkpoint "$WORK/ck" --quiet 2> /dev/null
    cp "$WORK/ck/checkpoint.safetensors" "$WORK/ck.safetensors"
    poke "$WORK/ck/checkpoint.safetensors" 1.running_var 3 -inf
    p=$WORK/mom
    expect_error "tensor '1.running_var' holds -inf at [3] (1 non-finite value of 4)" \
        --resume "$WORK/ck"
    cp "$WORK/ck.safetensors" "$WORK/ck/checkpoint.safetensors"
    poke "$WORK/ck/checkpoint.safetensors" optimizer.fc.weight.momentum_buffer 0 inf
    expect_error "tensor 'optimizer.fc.weight.momentum_buffer' holds inf at [0, 0]" \
        --resume "$WORK/ck"
    cp "$WORK/ck.safetensors" "$WORK/ck/checkpoint.safetensors"
    check "'$p' --resume '$WORK/ck' --quiet" "--resume of the checkpoint untouched failed"
    p=$WORK/p
fi

# a file that is not safetensors says what it is: torch.save's (with how to
# save safetensors instead), or text
if "$PYTHON" -c 'import torch' 2> /dev/null; then
    "$PYTHON" -c 'import sys, torch
torch.save({"fc.weight": torch.zeros(4, 3)}, sys.argv[1])
torch.save({"fc.weight": torch.zeros(4, 3)}, sys.argv[2], _use_new_zipfile_serialization=False)' \
        "$WORK/w.pt" "$WORK/old.pt"
    hint='save_file(model.state_dict(), "model.safetensors")'
    expect_error "w.pt: not a safetensors file (a zip archive, as torch.save writes); in PyTorch, save the weights with: from safetensors.torch import save_file; $hint" \
        --load "$WORK/w.pt" --max-steps 0
    expect_error "old.pt: not a safetensors file (a pickle, as torch.save wrote before PyTorch 1.6); in PyTorch, save the weights with: from safetensors.torch import save_file; $hint" \
        --load "$WORK/old.pt" --max-steps 0
fi
expect_error "ok.csv: not a safetensors file (it begins with text, '0.1,0.2,', not a header length)" \
    --load "$WORK/ok.csv" --max-steps 0

# a CSV's header line not skipped: the message says how
printf 'a,b,c,label\n0.1,0.2,0.3,1\n' > "$WORK/head.csv"
expect_error "head.csv:1:1: not a number: 'a'; the line looks like a header: skip it with header=1 in the source, as csv(\"$WORK/head.csv\", header=1)" \
    --data "$WORK/head.csv"

# the program keeps its name while it runs, though it executes itself again
# to make OpenMP's threads spin briefly, then sleep: pgrep finds it by
# name, once the policy is in its environment (no OpenMP: no policy,
# nothing to wait for)
name=np$$
cp "$p" "$WORK/$name"
"$WORK/$name" --data "$WORK/ok.csv" --epochs 100000000 > /dev/null 2>&1 &
pid=$!
if grep -q OMP_WAIT_POLICY "$p"; then
    i=0
    until tr '\0' '\n' < /proc/$pid/environ 2> /dev/null | grep -qx OMP_WAIT_POLICY=passive ||
        [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    check "[ $i -lt 100 ]" "OMP_WAIT_POLICY=passive is not in the running program's environment"
    check "tr '\\0' '\\n' < /proc/$pid/environ | grep -qx GOMP_SPINCOUNT=1000" \
        "GOMP_SPINCOUNT=1000 is not in the running program's environment"
fi
check "pgrep -x $name | grep -qx $pid" "pgrep -x $name does not find it: it is '$(cat /proc/$pid/comm)'"
stop $pid TERM
# a spin count of the user's is kept
if grep -q OMP_WAIT_POLICY "$p"; then
    GOMP_SPINCOUNT=77 "$WORK/$name" --data "$WORK/ok.csv" --epochs 100000000 > /dev/null 2>&1 &
    pid=$!
    i=0
    until tr '\0' '\n' < /proc/$pid/environ 2> /dev/null | grep -qx OMP_WAIT_POLICY=passive ||
        [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    check "[ $i -lt 100 ] && tr '\\0' '\\n' < /proc/$pid/environ | grep -qx GOMP_SPINCOUNT=77" \
        "the user's GOMP_SPINCOUNT=77 is not what the running program has"
    stop $pid TERM
fi
# under a debugger it does not: gdb would stop at the exec
if command -v gdb > /dev/null 2>&1 && command -v timeout > /dev/null 2>&1; then
    timeout 60 gdb -q -batch -ex run --args "$p" --data "$WORK/ok.csv" --max-steps 1 --quiet \
        > "$WORK/gdb.out" 2>&1
    check "grep -q 'exited normally' '$WORK/gdb.out' && ! grep -q 'executing new program' '$WORK/gdb.out'" \
        "under gdb: $(cat "$WORK/gdb.out")"
fi
finish
