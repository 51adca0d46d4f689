# tests/train.sh — what the training loop does besides training: the
# validation set and the test at the end, learning-rate schedules, the
# TensorBoard log, checkpoints (--max-steps, Ctrl-C, SIGTERM) and --resume,
# --eval, --predict, and MNIST's IDX files as a data source.
#
#  - a run stopped and resumed logs the very losses, and ends with the
#    very weights, of one that never stopped (bit for bit, on the cpu);
#  - the lr of each epoch is PyTorch's scheduler's (with python3-torch), and
#    a schedule's lr reaches the optimizer: with gamma 0 the weights stop;
#  - every scalar of the TensorBoard log is what the metrics say, read back
#    by the tensorboard package (skipped without it);
#  - --eval gives the training run's test loss; --predict's classes give
#    its accuracy.
# NETC_TRAIN_DEVICE=cuda runs it all on a GPU (tests/gpu/run.sh does).
# NETC_TRAIN_EMULATED=1 (tests/emu_suite.sh): the GPU is netc's emulated
# one, some thousand times slower; the two things sized to keep a program
# at work while a signal comes (the late SIGTERM's test set, the progress
# line's model) are sized for it.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
DEV=${NETC_TRAIN_DEVICE:-cpu}
emulated=${NETC_TRAIN_EMULATED:-0}

TRA=$SRC/data/optdigits.tra
TES=$SRC/data/optdigits.tes
strip() { grep "$2" "$1" | grep -v '"partial"' | sed 's/, "seconds".*//'; } # FILE PATTERN: whole records, no timings
field() { grep "\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p"; }

model() { # NAME EXTRA-STATEMENTS: a digits MLP with them
    cat > "$WORK/$1.net" <<NET
model $1 {
    input  x[64]
    target class(10)
    linear(32)
    relu
    dropout(0.1)
    linear(10)
    loss      cross_entropy
    optimizer sgd(lr=0.05, momentum=0.9)
    device    $DEV
    train     csv("$TRA", scale=0.0625) batch 64 epochs 4 seed 3
$2
}
NET
    compile "$WORK/$1.net" "$WORK/$1"
}

# ------------------------------------------------------ validation, test
model vt '    valid holdout(0.25)
    test  csv("'"$TES"'", scale=0.0625)'
"$WORK/vt" --metrics "$WORK/vt.jsonl" > "$WORK/vt.out"
st=$?
check "[ $st -eq 0 ]" "vt: the run failed: $(cat "$WORK/vt.out")"
check "grep -q '2867 training samples, 956 validation, 1797 test' '$WORK/vt.out'" \
    "vt: 25 % of 3823 samples held out for validation: $(head -n 2 "$WORK/vt.out")"
check "[ \$(grep -c '\"valid_loss\"' '$WORK/vt.jsonl') -eq 4 ]" "vt: a validation every epoch"
check "[ \$(grep -c '\"test_loss\"' '$WORK/vt.jsonl') -eq 1 ]" "vt: one test, at the end"
check "grep -q '^test_loss .* test_accuracy .*(1797 samples)' '$WORK/vt.out'" "vt: no test line"
"$WORK/vt" --epochs 1 --valid-data "$TES" --quiet --metrics "$WORK/vt2.jsonl"
check "[ \"\$(field '$WORK/vt2.jsonl' valid_loss)\" = \"\$(field '$WORK/vt2.jsonl' test_loss)\" ]" \
    "vt: --valid-data of the test file: its validation is not the test's"

# ---------------------------------------------------------------- schedules
model sstep 'schedule step(size=2, gamma=0.5)'
model scos 'schedule cosine(t_max=3, eta_min=0.001)'
model splat '    valid holdout(0.2)
    schedule reduce_on_plateau(factor=0.5, patience=0, threshold=0.5)'
for s in sstep scos splat; do
    "$WORK/$s" --epochs 6 --quiet --metrics "$WORK/$s.jsonl"
    st=$?
    check "[ $st -eq 0 ]" "$s: the run failed"
done
lrs() { sed -n 's/.*"lr": \([^,]*\),.*/\1/p' "$1" | tr '\n' ' '; }
check "[ \"\$(lrs '$WORK/sstep.jsonl')\" = '0.05 0.05 0.025 0.025 0.0125 0.0125 ' ]" \
    "step(2, 0.5): lr $(lrs "$WORK/sstep.jsonl")"
if "$PYTHON" -c 'import torch' 2> /dev/null; then
    cat > "$WORK/sched.py" <<'PY'
import json, sys, torch
kind, path = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(path) if '"epoch"' in l]
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=0.05, momentum=0.9)
S = torch.optim.lr_scheduler
sch = {"sstep": lambda: S.StepLR(opt, step_size=2, gamma=0.5),
       "scos": lambda: S.CosineAnnealingLR(opt, T_max=3, eta_min=0.001),
       "splat": lambda: S.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.5)}[kind]()
bad = 0
for r in recs:
    want = opt.param_groups[0]["lr"]
    if abs(r["lr"] - want) > 1e-8 * want:
        print(f"{kind}: epoch {r['epoch']}: lr {r['lr']}, PyTorch's {want!r}")
        bad += 1
    sch.step(r["valid_loss"]) if kind == "splat" else sch.step()
sys.exit(1 if bad else 0)
PY
    export PYTHONWARNINGS=ignore # torch's warning that no optimizer.step() came first
    for s in sstep scos splat; do
        check "'$PYTHON' '$WORK/sched.py' $s '$WORK/$s.jsonl'" "$s: the lr of each epoch is not PyTorch's"
    done
else
    echo "train: python3-torch not installed: the schedules' lr not compared with PyTorch's"
fi
check "[ \"\$(lrs '$WORK/splat.jsonl')\" != '0.05 0.05 0.05 0.05 0.05 0.05 ' ]" \
    "reduce_on_plateau(threshold=0.5) never reduced the lr"
# the scheduled lr is the optimizer's: with gamma 0 nothing moves after epoch 1
model szero 'schedule step(size=1, gamma=0)'
"$WORK/szero" --epochs 1 --quiet --save "$WORK/z1.safetensors"
"$WORK/szero" --epochs 3 --quiet --save "$WORK/z3.safetensors"
check "cmp -s '$WORK/z1.safetensors' '$WORK/z3.safetensors'" "step(1, gamma=0): the weights moved after epoch 1"

# -------------------------------------------------- checkpoints and --resume
model ck '    valid holdout(0.2)
    schedule step(size=1, gamma=0.7)'
run() { "$WORK/ck" --log-every 1 --quiet "$@"; }
run --epochs 4 --metrics "$WORK/full.jsonl" --save "$WORK/full.safetensors"
run --epochs 4 --metrics "$WORK/cut.jsonl" --max-steps 70 --checkpoint "$WORK/ckd" --logdir "$WORK/tbcut"
check "[ -f '$WORK/ckd/checkpoint.safetensors' ]" "--max-steps 70 --checkpoint: no checkpoint"
check "[ -z \"\$(ls '$WORK/ckd' | grep -v '^checkpoint.safetensors\$')\" ]" "the checkpoint directory holds more: $(ls "$WORK/ckd")"
run --epochs 4 --metrics "$WORK/cut.jsonl" --resume "$WORK/ckd" --save "$WORK/cut.safetensors" \
    --logdir "$WORK/tbcut"
check "[ \"\$(strip '$WORK/full.jsonl' step)\" = \"\$(strip '$WORK/cut.jsonl' step)\" ]" \
    "stopped at step 70 and resumed: other step losses than a run never stopped"
check "[ \"\$(strip '$WORK/full.jsonl' epoch)\" = \"\$(strip '$WORK/cut.jsonl' epoch)\" ]" \
    "stopped and resumed: other epoch records (train, validation, lr)"
check "cmp -s '$WORK/full.safetensors' '$WORK/cut.safetensors'" "stopped and resumed: other final weights"
check "[ \"\$(field '$WORK/full.jsonl' test_loss)\" = \"\$(field '$WORK/cut.jsonl' test_loss)\" ]" "stopped and resumed: another test loss"

# with batchnorm and adamw: its running statistics and batch count travel
# in the checkpoint (the validation after the resume reads them, the final
# file holds them), and adamw's two states
cat > "$WORK/ckbn.net" <<NET
model ckbn {
    input  x[64]
    target class(10)
    linear(32)
    batchnorm1d
    relu
    linear(10)
    loss      cross_entropy
    optimizer adamw(lr=0.01)
    device    $DEV
    train     csv("$TRA", scale=0.0625) batch 64 epochs 2 seed 3
    valid     holdout(0.2)
}
NET
compile "$WORK/ckbn.net" "$WORK/ckbn"
runbn() { "$WORK/ckbn" --log-every 1 --quiet "$@"; }
runbn --metrics "$WORK/bnfull.jsonl" --save "$WORK/bnfull.safetensors"
runbn --metrics "$WORK/bncut.jsonl" --max-steps 30 --checkpoint "$WORK/bnckd"
check "grep -aq '\"optimizer.0.weight.exp_avg_sq\"' '$WORK/bnckd/checkpoint.safetensors' &&
       grep -aq '\"optimizer\":\"adamw\"' '$WORK/bnckd/checkpoint.safetensors'" \
    "adamw's checkpoint: no optimizer.0.weight.exp_avg_sq, or not named adamw"
runbn --metrics "$WORK/bncut.jsonl" --resume "$WORK/bnckd" --save "$WORK/bncut.safetensors"
check "[ \"\$(strip '$WORK/bnfull.jsonl' step)\" = \"\$(strip '$WORK/bncut.jsonl' step)\" ]" \
    "batchnorm, stopped at step 30 and resumed: other step losses than a run never stopped"
check "[ \"\$(strip '$WORK/bnfull.jsonl' epoch)\" = \"\$(strip '$WORK/bncut.jsonl' epoch)\" ]" \
    "batchnorm, stopped and resumed: other epoch records (the validation uses the running statistics)"
check "cmp -s '$WORK/bnfull.safetensors' '$WORK/bncut.safetensors'" \
    "batchnorm, stopped and resumed: other final weights or buffers"

# Ctrl-C and SIGTERM: stop between two steps, save, exit 128 + the signal
# (the program is started with both signals at their defaults: a background
# job would ignore Ctrl-C, and so would everything under nohup)
sigs="INT:130 TERM:143"
[ -n "$default_signals" ] ||
    { sigs="TERM:143"; echo "train.sh: no env --default-signal: the SIGINT case is skipped"; }
for sig_status in $sigs; do
    sig=${sig_status%:*} want=${sig_status#*:}
    rm -rf "$WORK/sd" "$WORK/sig.jsonl"
    $default_signals "$WORK/ck" --log-every 1 --quiet --epochs 100000 --metrics "$WORK/sig.jsonl" \
        --checkpoint "$WORK/sd" 2> "$WORK/sig.err" &
    pid=$!
    i=0
    while [ ! -f "$WORK/sd/checkpoint.safetensors" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    stop $pid $sig
    status=$?
    check "[ $status -eq $want ]" "SIG$sig: exit status $status, expected $want; $(cat "$WORK/sig.err")"
    check "grep -q 'stopped by .* saved to .*--resume' '$WORK/sig.err'" "SIG$sig: $(cat "$WORK/sig.err")"
    steps=$(sed -n 's/.* after \([0-9]*\) steps.*/\1/p' "$WORK/sig.err")
    end=$((${steps:-0} + 100))
    run --epochs 100000 --max-steps $end --metrics "$WORK/sig.jsonl" --resume "$WORK/sd"
    run --epochs 100000 --max-steps $end --metrics "$WORK/sigfull.jsonl"
    check "[ \"\$(strip '$WORK/sigfull.jsonl' step)\" = \"\$(strip '$WORK/sig.jsonl' step)\" ]" \
        "SIG$sig at step $steps and resumed: other step losses than a run never stopped"
done

# what --resume refuses, naming the reason
expect() { # SUBSTRING ARGS...: the program fails, saying SUBSTRING
    want=$1
    shift
    "$@" > "$WORK/out" 2> "$WORK/err"
    status=$?
    check "[ $status -eq 1 ] && grep -qF -- \"\$want\" '$WORK/err'" \
        "'$*': exit $status, expected '$want' in: $(cat "$WORK/err")"
}
expect "resume it without --seed" "$WORK/ck" --resume "$WORK/ckd" --seed 9
expect "resume it without --batch" "$WORK/ck" --resume "$WORK/ckd" --batch 7
expect "no-such/checkpoint.safetensors" "$WORK/ck" --resume "$WORK/no-such"
expect "a checkpoint of model 'ck', not 'vt'" "$WORK/vt" --resume "$WORK/ckd"
expect "give one" "$WORK/ck" --resume "$WORK/ckd" --load "$WORK/full.safetensors"
# the same model with Adam's L2 decay for AdamW's: another optimizer
sed 's/adamw(lr=0.01)/adam(lr=0.01, weight_decay=0.01)/' "$WORK/ckbn.net" > "$WORK/ckbn_adam.net"
compile "$WORK/ckbn_adam.net" "$WORK/ckbn_adam"
expect "a checkpoint of a run with adamw, but the model's optimizer is adam" \
    "$WORK/ckbn_adam" --resume "$WORK/bnckd"
# a checkpoint is a weights file too
"$WORK/ck" --load "$WORK/ckd/checkpoint.safetensors" --max-steps 0 --save "$WORK/w.safetensors" --quiet
st=$?
check "[ $st -eq 0 ] && cmp -s '$WORK/w.safetensors' '$WORK/full.safetensors'" \
    "--load of the final checkpoint: not the run's final weights"

# ---------------------------------------------------------------- TensorBoard
"$WORK/vt" --epochs 3 --quiet --log-every 20 --metrics "$WORK/tb.jsonl" --logdir "$WORK/tb/run1"
check "ls '$WORK'/tb/run1/events.out.tfevents.* > /dev/null" "--logdir: no event file"
cat > "$WORK/expect.py" <<'PY'
import json, sys
e = {}
def add(tag, step, v):
    e.setdefault(tag, []).append([step, v])
last = 0
for r in map(json.loads, open(sys.argv[1])):
    if "step" in r:
        add("train/step_loss", r["step"], r["loss"])
    elif "epoch" in r:
        last = r["epoch"]
        add("train/loss", last, r["train_loss"])
        add("valid/loss", last, r["valid_loss"])
        add("valid/accuracy", last, r["valid_accuracy"])
        add("lr", last, r["lr"])
    else:
        add("test/loss", last, r["test_loss"])
        add("test/accuracy", last, r["test_accuracy"])
json.dump(e, open(sys.argv[2], "w"))
PY
"$PYTHON" "$WORK/expect.py" "$WORK/tb.jsonl" "$WORK/tb.json"
"$PYTHON" "$SRC/tests/tfevents_check.py" "$WORK/tb/run1" "$WORK/tb.json"
status=$?
if [ $status -eq 77 ]; then
    echo "train: the tensorboard package is not installed: the event files not read back"
else
    check "[ $status -eq 0 ]" "TensorBoard's reading of --logdir differs from the metrics"
    # a run stopped and resumed logs, in two files, what one never stopped logs
    "$PYTHON" "$WORK/expect.py" "$WORK/full.jsonl" "$WORK/full.json"
    check "'$PYTHON' '$SRC/tests/tfevents_check.py' '$WORK/tbcut' '$WORK/full.json'" \
        "TensorBoard: a run stopped and resumed logged other scalars than one never stopped"
fi

# ------------------------------------------------------------ --eval, --predict
"$WORK/vt" --epochs 2 --quiet --save "$WORK/vt.safetensors" --metrics "$WORK/vt3.jsonl"
"$WORK/vt" --eval --load "$WORK/vt.safetensors" > "$WORK/eval.out"
st=$?
check "[ $st -eq 0 ]" "--eval failed"
loss=$(sed -n 's/^test_loss \([0-9.e+-]*\) .*/\1/p' "$WORK/eval.out")
check "[ \"$loss\" = \"\$(printf '%.6g' \$(field '$WORK/vt3.jsonl' test_loss))\" ]" \
    "--eval: test loss '$loss', the training run's $(field "$WORK/vt3.jsonl" test_loss)"
"$WORK/vt" --predict "$TES" --load "$WORK/vt.safetensors" -o "$WORK/pred.csv" --quiet
st=$?
check "[ $st -eq 0 ] && [ \$(wc -l < '$WORK/pred.csv') -eq 1798 ]" "--predict: not a header and 1797 rows"
check "head -n 1 '$WORK/pred.csv' | grep -q '^line,class,p0,p1,.*,p9\$'" "--predict: header $(head -n 1 "$WORK/pred.csv")"
acc=$(tail -n +2 "$WORK/pred.csv" | cut -d, -f2 | paste -d, - "$TES" | awk -F, '$1 == $66 { c++ } END { printf "%.9g", c / NR }')
check "[ \"$acc\" = \"\$(printf '%.9g' \$(field '$WORK/vt3.jsonl' test_accuracy))\" ]" \
    "--predict's classes: accuracy $acc, the training run's $(field "$WORK/vt3.jsonl" test_accuracy)"
# features alone (no label column) give the same predictions, to stdout
cut -d, -f1-64 "$TES" > "$WORK/features.csv"
"$WORK/vt" --predict "$WORK/features.csv" --load "$WORK/vt.safetensors" > "$WORK/pred2.csv"
check "cmp -s '$WORK/pred.csv' '$WORK/pred2.csv'" "--predict of features alone differs"
# a header line is told by its content, whatever the model's header=; each
# prediction names its line: with a header, a blank line, 1 and 2 rows
{ printf 'f%d,' $(seq 1 63); echo f64; head -n 1 "$WORK/features.csv"; echo;
  sed -n 2p "$WORK/features.csv"; } > "$WORK/head.csv"
"$WORK/vt" --predict "$WORK/head.csv" --load "$WORK/vt.safetensors" > "$WORK/head.out"
check "[ \"\$(cut -d, -f1 '$WORK/head.out' | tr '\n' ' ')\" = 'line 2 4 ' ]" \
    "--predict of a file with a header and a blank line: $(cut -d, -f1-2 "$WORK/head.out" | tr '\n' ' ')"
check "same_prediction \"\$(sed -n 2p '$WORK/head.out' | cut -d, -f2-)\" \"\$(sed -n 2p '$WORK/pred.csv' | cut -d, -f2-)\"" \
    "--predict of a file with a header predicts otherwise: $(sed -n 2p "$WORK/head.out" | cut -d, -f2-) against $(sed -n 2p "$WORK/pred.csv" | cut -d, -f2-)"
head -n 2 "$TES" > "$WORK/two.csv"
head -n 1 "$TES" > "$WORK/one.csv"
"$WORK/vt" --predict "$WORK/two.csv" --load "$WORK/vt.safetensors" > "$WORK/two.out"
"$WORK/vt" --predict "$WORK/one.csv" --load "$WORK/vt.safetensors" > "$WORK/one.out"
check "[ \$(wc -l < '$WORK/two.out') -eq 3 ] && [ \$(wc -l < '$WORK/one.out') -eq 2 ]" \
    "--predict of 2 rows and of 1: $(cat "$WORK/two.out" "$WORK/one.out")"
expect "cannot write" "$WORK/vt" --predict "$TES" -o "$WORK/no/such/dir/p.csv"
check "[ ! -e '$WORK/no' ]" "a failed --predict left something"
expect "--eval: no test data" "$WORK/ck" --eval

# --------------------------------------------------------------------- MNIST
# IDX files as MNIST's, 28x28 bytes: the class shifts the image's mean
"$PYTHON" - "$WORK/mnist" <<'PY'
import os, random, struct, sys
d = sys.argv[1]
os.makedirs(d)
for part, n in (("train", 300), ("t10k", 100)):
    rnd = random.Random(n)
    labels = [rnd.randrange(10) for _ in range(n)]
    with open(f"{d}/{part}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        f.write(bytes(min(255, rnd.randrange(60) + 20 * y) for y in labels for _ in range(784)))
    with open(f"{d}/{part}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
PY
cat > "$WORK/mn.net" <<NET
model mn {
    input  image[1, 28, 28]
    target class(10)
    conv2d(4, kernel=5, stride=2)
    relu
    flatten
    linear(10)
    loss      cross_entropy
    optimizer adam(lr=0.01)
    device    $DEV
    train     mnist("$WORK/mnist") batch 32 epochs 30
    test      mnist("$WORK/mnist")
}
NET
compile "$WORK/mn.net" "$WORK/mn"
"$WORK/mn" --quiet --metrics "$WORK/mn.jsonl"
acc=$(field "$WORK/mn.jsonl" test_accuracy)
check "awk 'BEGIN { exit !(\"$acc\" + 0 > 0.8) }'" "mnist: test accuracy '$acc' on separable synthetic digits"

# ------------------------------------ losses that are not numbers, huge ones
# a regression whose validation targets are far off the scale (its loss
# overflows a float) and whose test targets are large (a finite 1e18)
awk 'BEGIN { for (i = 0; i < 40; i++) printf "%g,%g,%g\n", i % 7 / 7, i % 5 / 5, i % 3 / 3 }' > "$WORK/small.csv"
awk 'BEGIN { for (i = 0; i < 8; i++) printf "%g,%g,1e30\n", i / 8, i / 4 }' > "$WORK/offscale.csv"
awk 'BEGIN { for (i = 0; i < 8; i++) printf "%g,%g,1e9\n", i / 8, i / 4 }' > "$WORK/large.csv"
cat > "$WORK/reg.net" <<NET
model reg {
    input  x[2]
    target value(1)
    linear(1)
    loss      mse
    optimizer sgd(lr=0.05)
    device    $DEV
    train     csv("$WORK/small.csv") batch 8 epochs 3 seed 1
}
NET
compile "$WORK/reg.net" "$WORK/reg"
# every line of a metrics file is whole JSON (no inf, NaN, or half a record)
json_lines() {
    [ -s "$1" ] && [ -z "$(tail -c 1 "$1")" ] && "$PYTHON" -c '
import json, sys
def refuse(c): raise ValueError(c)
for line in open(sys.argv[1]): json.loads(line, parse_constant=refuse)' "$1"
}
"$WORK/reg" --valid-data "$WORK/offscale.csv" --metrics "$WORK/inf.jsonl" > "$WORK/inf.out" 2> "$WORK/inf.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'the validation loss is infinite after step 5 (epoch 1)' '$WORK/inf.err'" \
    "an infinite validation loss: exit $st, $(cat "$WORK/inf.err")"
check "json_lines '$WORK/inf.jsonl'" "an infinite validation loss: the metrics are not JSON: $(cat "$WORK/inf.jsonl")"
check "grep -q '\"valid_loss\": null, \"valid_loss_nonfinite\": \"inf\"' '$WORK/inf.jsonl'" \
    "an infinite validation loss is not null in the metrics: $(cat "$WORK/inf.jsonl")"
check "[ \$(grep -c '\"epoch\"' '$WORK/inf.jsonl') -eq 1 ]" "an infinite validation loss: the run went on"
"$WORK/reg" --test-data "$WORK/large.csv" --metrics "$WORK/large.jsonl" > "$WORK/large.out"
st=$?
check "[ $st -eq 0 ] && grep -q '^test_loss [0-9.]*e+1[78]  (8 samples)' '$WORK/large.out'" \
    "a loss of 1e18 not printed with %g: $(tail -n 1 "$WORK/large.out")"
check "json_lines '$WORK/large.jsonl'" "a test loss of 1e18: the metrics are not JSON"

# ------------------------------------------------- write errors of the logs
# a full disk stops the run at once, naming the file and the reason
"$WORK/ck" --epochs 3 --metrics /dev/full > "$WORK/full.out" 2> "$WORK/full.err"
st=$?
check "[ $st -eq 1 ] && grep -q '/dev/full: cannot write: No space left on device' '$WORK/full.err'" \
    "--metrics /dev/full: exit $st, $(cat "$WORK/full.err")"
check "! grep -q '^epoch   2' '$WORK/full.out'" "--metrics /dev/full: the run went on"
# a file size limit (SIGXFSZ ignored: EFBIG) cuts a write short: what was
# written of the record is taken back
( trap '' XFSZ; ulimit -f 1; exec "$WORK/ck" --epochs 2 --quiet --log-every 1 --metrics "$WORK/fsz.jsonl" ) 2> "$WORK/fsz.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'fsz.jsonl: cannot write: File too large' '$WORK/fsz.err'" \
    "--metrics past the file size limit: exit $st, $(cat "$WORK/fsz.err")"
check "json_lines '$WORK/fsz.jsonl'" "--metrics past the file size limit: a record cut: $(tail -c 100 "$WORK/fsz.jsonl")"
( trap '' XFSZ; ulimit -f 1; exec "$WORK/ck" --epochs 2 --quiet --log-every 1 --logdir "$WORK/fsz" ) 2> "$WORK/fsz.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'fsz/events.out.tfevents.*: cannot write: File too large' '$WORK/fsz.err'" \
    "--logdir past the file size limit: exit $st, $(cat "$WORK/fsz.err")"
whole_records() { # an event file's TFRecords end where it ends
    "$PYTHON" -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
i = n = 0
while i + 12 <= len(b):
    i += 12 + struct.unpack("<Q", b[i:i + 8])[0] + 4
    n += 1
sys.exit(0 if i == len(b) and n > 0 else 1)' "$1"
}
check "whole_records $WORK/fsz/events.out.tfevents.*" "--logdir past the file size limit: a record cut"

# ------------------------------------------ a checkpoint's metadata checked
# each value out of its flag's range is refused, naming the file and field
"$WORK/ck" --quiet --max-steps 3 --checkpoint "$WORK/meta"
set_meta() { # KEY VALUE: DIR meta's checkpoint with KEY = VALUE, in DIR bad
    mkdir -p "$WORK/bad"
    "$PYTHON" -c '
import json, struct, sys
src, dst, key, value = sys.argv[1:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"][key] = value
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(dst, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])' \
        "$WORK/meta/checkpoint.safetensors" "$WORK/bad/checkpoint.safetensors" "$1" "$2"
}
bad_meta() { # KEY VALUE EXPECTED: resuming from it fails, saying so
    set_meta "$1" "$2"
    expect "$WORK/bad/checkpoint.safetensors: metadata '$1' = '$2': expected $3" \
        timeout 60 "$WORK/ck" --quiet --resume "$WORK/bad" # a batch of 0 never ends
}
bad_meta batch 4294967296 "a whole number from 1 to 1048576"
bad_meta batch 2147483648 "a whole number from 1 to 1048576"
bad_meta batch 1048577 "a whole number from 1 to 1048576"
bad_meta shuffle 7 "a whole number from 0 to 1"
bad_meta seed 9007199254740992 "a whole number from 0 to 9007199254740991"
bad_meta lr -0x1p+0 "a non-negative number"
bad_meta loss_sum inf "a finite number"
bad_meta epochs -1 "a whole number from 0 to 2147483647"
set_meta position 3058
expect "$WORK/bad/checkpoint.safetensors: metadata 'position' = 3058: past the end of the training data (3058 samples)" \
    timeout 60 "$WORK/ck" --quiet --resume "$WORK/bad"

# ------------------------------- a resumed run's length and data remembered
head -n 400 "$TRA" > "$WORK/part.csv"
"$WORK/ck" --quiet --epochs 6 --data "$WORK/part.csv" --max-steps 3 --checkpoint "$WORK/len"
cp -R "$WORK/len" "$WORK/len2"
"$WORK/ck" --resume "$WORK/len" --metrics "$WORK/len.jsonl" > "$WORK/len.out"
st=$?
check "[ $st -eq 0 ] && [ \"\$(field '$WORK/len.jsonl' epoch)\" = 6 ]" \
    "--epochs 6, resumed without it: last epoch $(field "$WORK/len.jsonl" epoch), not 6"
check "grep -q ' 320 training samples' '$WORK/len.out'" \
    "--data of 400 rows, resumed without it: $(head -n 1 "$WORK/len.out")"
expect "the run was started with --data '$WORK/part.csv'; resume it without --data" \
    "$WORK/ck" --resume "$WORK/len2" --data "$TRA"
expect "the run was started without --valid-data; resume it without --valid-data" \
    "$WORK/ck" --resume "$WORK/len2" --valid-data "$TES"
# an explicit --epochs is the run's new length: a finished run goes on
"$WORK/ck" --quiet --resume "$WORK/len" --epochs 7 --metrics "$WORK/len7.jsonl"
check "[ \"\$(field '$WORK/len7.jsonl' epoch)\" = 7 ] && [ \$(grep -c '\"epoch\"' '$WORK/len7.jsonl') -eq 1 ]" \
    "a finished run resumed with --epochs 7: $(cat "$WORK/len7.jsonl")"
"$WORK/ck" --quiet --resume "$WORK/len2" --data "$WORK/part.csv" --max-steps 4
check "[ $? -eq 0 ]" "resumed with the --data it was started with: refused"

# ------------------------------------------ temporaries of saves killed
# a save removes what a save of the same file killed part way left
# (FILE.tmp.PID.XXXXXX, PID gone), and keeps the rest
dead=$(sh -c 'echo $$')
mkdir -p "$WORK/tmps"
: > "$WORK/tmps/checkpoint.safetensors.tmp.$dead.Ab12Cd"
: > "$WORK/tmps/checkpoint.safetensors.tmp.$$.Ab12Cd"
: > "$WORK/tmps/other.tmp.$dead.Ab12Cd"
"$WORK/ck" --quiet --max-steps 1 --checkpoint "$WORK/tmps"
check "[ ! -e '$WORK/tmps/checkpoint.safetensors.tmp.$dead.Ab12Cd' ]" "a stale temporary was left"
check "[ -e '$WORK/tmps/checkpoint.safetensors.tmp.$$.Ab12Cd' ] && [ -e '$WORK/tmps/other.tmp.$dead.Ab12Cd' ]" \
    "a save removed a temporary that was not its stale one: $(ls "$WORK/tmps")"

# --------------------------------------- output paths checked before training
: > "$WORK/afile"
early() { # MESSAGE FLAGS...: refused before training begins
    want=$1
    shift
    "$WORK/ck" --epochs 2 --checkpoint "$WORK/notmade/ck" "$@" > "$WORK/early.out" 2> "$WORK/early.err"
    st=$?
    check "[ $st -eq 1 ] && grep -qF -- \"\$want\" '$WORK/early.err' && [ ! -s '$WORK/early.out' ]" \
        "$*: exit $st, not refused before training: $(cat "$WORK/early.out" "$WORK/early.err")"
}
early "$WORK/nodir/w.safetensors: cannot write: No such file or directory" --save "$WORK/nodir/w.safetensors"
early "$WORK/afile/ck: cannot write: Not a directory" --checkpoint "$WORK/afile/ck"
early "$WORK/afile: not a directory" --logdir "$WORK/afile"
early "$WORK/nodir/m.jsonl: cannot write: No such file or directory" --metrics "$WORK/nodir/m.jsonl"
early "$WORK: cannot write: Is a directory" --save "$WORK"
early "/dev/null: not a regular file" --save /dev/null
check "[ -c /dev/null ]" "/dev/null is no longer a device"
check "[ ! -e '$WORK/notmade' ] && [ -z \"\$(ls -A '$WORK' | grep netc-check)\" ]" \
    "checking the outputs made something: $(ls -A "$WORK")"

# ---------------------------------------- signals outside the training loop
# Pipes make the timing certain: a program reading a pipe or writing to
# one waits for the test.  The signal goes to the program's own pid, with
# no timeout between, and every wait is bounded (timeout for the test's
# side, await for the program's).  With a timeout between, the start-up
# check failed twice on a loaded CI machine (exit 143 and nothing said, as
# if a second SIGTERM had come), and the one after the last epoch on the
# emulated GPU: timeout -k 5 passes SIGTERM on and kills the program 5 s
# later, before its test, slow there, was done (exit 137).
# During start-up, its training data a pipe the test holds back: the
# program stops before the work begins, saying so.
mkfifo "$WORK/slow.csv"
"$WORK/vt" --epochs 1 --data "$WORK/slow.csv" --checkpoint "$WORK/early" \
    > "$WORK/sigup.out" 2> "$WORK/sigup.err" &
pid=$!
# the pipe opens when the program opens it: it is then reading its data
timeout 30 sh -c 'exec 3> "$1"; kill -TERM "$2"; cat "$3" >&3' sh "$WORK/slow.csv" $pid "$TRA"
await $pid
st=$?
check "[ $st -eq 143 ] && grep -q 'stopped by SIGTERM while starting; nothing done' '$WORK/sigup.err'" \
    "SIGTERM during start-up: exit $st, $(cat "$WORK/sigup.err")"
check "[ ! -s '$WORK/sigup.out' ] && [ ! -e '$WORK/early' ]" "SIGTERM during start-up: the run began"
# After the last epoch, its metrics a pipe the test reads: a SIGTERM once
# the last epoch's record is out lets the run save its weights (the test
# is left out, or finished if under way) and exit 143.  The test set is
# made large (60 copies), so that the signal lands while the program is
# still at work even on a loaded machine; on the emulated device 3 copies
# take longer than 60 on the cpu, and the reader's 30 s bound is for the
# whole run.
copies=60
[ "$emulated" = 1 ] && copies=3
i=0
while [ $i -lt $copies ]; do cat "$TES"; i=$((i + 1)); done > "$WORK/bigtest.csv"
mkfifo "$WORK/late.jsonl"
"$WORK/vt" --epochs 2 --quiet --metrics "$WORK/late.jsonl" \
    --test-data "$WORK/bigtest.csv" --save "$WORK/late.safetensors" 2> "$WORK/late.err" &
pid=$!
timeout 30 sh -c 'exec < "$1"
while read -r line; do
    case $line in *"\"epoch\": 2,"*) kill -TERM "$2" ;; esac
done' sh "$WORK/late.jsonl" $pid
await $pid
st=$?
check "[ $st -eq 143 ] && grep -q 'stopped by SIGTERM after the last step.*; weights saved to .*late.safetensors' '$WORK/late.err'" \
    "SIGTERM after the last epoch: exit $st, $(cat "$WORK/late.err")"
"$WORK/vt" --eval --quiet --load "$WORK/late.safetensors"
check "[ $? -eq 0 ]" "SIGTERM after the last epoch: no weights saved"

# ----------------------------------------------------- the live progress line
# on a terminal (a pty): the epoch, the share and steps done, the time taken
# and left, the pace and the loss, in one line of at most 79 columns.  The
# program is stopped once a line has been read.  The model is wide, so
# that its pace fits the line on the cpu; on the emulated device, where
# the line waits for the steps queued before it and the stop for those
# after, some 80 steps, a narrower one keeps that within the 60 s.
units=2048
[ "$emulated" = 1 ] && units=128
awk '{ for (i = 0; i < 4; i++) print }' "$TRA" > "$WORK/tra4.csv"
cat > "$WORK/wide.net" <<NET
model wide {
    input  x[64]
    target class(10)
    linear($units)
    relu
    linear(10)
    loss      cross_entropy
    optimizer sgd(lr=0.01)
    device    $DEV
    train     csv("$WORK/tra4.csv", scale=0.0625) batch 1 epochs 1000
}
NET
compile "$WORK/wide.net" "$WORK/wide"
cat > "$WORK/live.py" <<'PY'
import os, pty, re, signal, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out, line = b"", None
while line is None:
    try:
        b = os.read(fd, 4096)
    except OSError:
        break
    if not b:
        break
    out += b
    m = re.search(rb"\r(  epoch [^\r\n]*?)\x1b\[K", out)
    line = m and m.group(1).decode()
os.kill(pid, signal.SIGTERM)
try:
    while os.read(fd, 4096):
        pass
except OSError:
    pass
os.waitpid(pid, 0)
print(line)
want = r"  epoch 1/1000 +\d+%  \d+/15292  \d\d:\d\d<\d\d:\d\d  \d+ samples/s  loss [0-9.e+-]+"
sys.exit(0 if line and len(line) <= 79 and re.fullmatch(want, line) else 1)
PY
line=$(timeout 60 "$PYTHON" "$WORK/live.py" "$WORK/wide" --threads 1)
check "[ $? -eq 0 ]" "the progress line: '$line'"

finish
