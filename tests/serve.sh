# tests/serve.sh — a trained model used later gives the answers training
# would: a model that standardizes its features keeps the statistics with
# its weights, and --eval, --predict, the C API (--emit=lib) and PyTorch
# loading the saved file all apply them.  Checked against a reference
# written here in Python from the file alone (the weights and the
# metadata), and against PyTorch's load_state_dict(strict=True) where
# torch is installed.
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"

cat > "$WORK/bos.net" <<NET
model bos {
    input  x[13]
    target value(1)
    linear(16)
    relu
    linear(1)
    loss      mse
    optimizer adam(lr=0.01)
    device    cpu
    train     table("$SRC/data/boston_housing.data", standardize=true) batch 32 epochs 5 seed 3
    valid     holdout(0.2)
    test      holdout(0.2)
}
NET
compile "$WORK/bos.net" "$WORK/bos" || finish
head -n 5 "$SRC/data/boston_housing.data" > "$WORK/rows.data"

# training saves the statistics with the weights; --eval of the saved
# weights gives the very test record training ended with (held-out parts
# and all: the statistics are those of the rows training trained on)
"$WORK/bos" --quiet --save "$WORK/w.safetensors" --metrics "$WORK/train.jsonl"
check "[ $? -eq 0 ]" "training failed"
"$WORK/bos" --quiet --load "$WORK/w.safetensors" --eval --metrics "$WORK/eval.jsonl"
check "[ \"\$(tail -n 1 '$WORK/train.jsonl')\" = \"\$(cat '$WORK/eval.jsonl')\" ]" \
    "--eval: $(cat "$WORK/eval.jsonl"), training ended with $(tail -n 1 "$WORK/train.jsonl")"

# --predict applies them
"$WORK/bos" --load "$WORK/w.safetensors" --predict "$WORK/rows.data" -o "$WORK/pred.csv" 2> /dev/null
check "[ $? -eq 0 ]" "--predict failed"

# the reference: the file alone, read here; every prediction within 1e-5
# relative; and PyTorch's, the file's tensors loaded strictly into the
# same network, where torch is installed
cat > "$WORK/ref.py" <<'PY'
import json, struct, sys
weights, rows, pred = sys.argv[1:4]
raw = open(weights, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__")
def tensor(name):
    t = head[name]
    a, b = t["data_offsets"]
    return list(struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])), t["shape"]
mean = json.loads(meta["standardize_mean"])
std = json.loads(meta["standardize_std"])
w0, s0 = tensor("0.weight"); b0, _ = tensor("0.bias")
w2, s2 = tensor("2.weight"); b2, _ = tensor("2.bias")
got = [float(l.split(",")[-1]) for l in open(pred).readlines()[1:]]
X = [[float(f) for f in line.split()][:13] for line in open(rows)]
def close(p, y):
    return abs(p - y) <= 1e-5 * max(1.0, abs(y))
bad = 0
for i, x in enumerate(X):
    x = [(v - m) / (s if s >= 1e-12 else 1) for v, m, s in zip(x, mean, std)]
    h = [max(0.0, b0[o] + sum(w0[o * 13 + k] * x[k] for k in range(13))) for o in range(s0[0])]
    y = b2[0] + sum(w2[k] * h[k] for k in range(s2[1]))
    if not close(got[i], y):
        print("row %d: netc %g, reference %g" % (i + 1, got[i], y))
        bad += 1
try:
    import torch
except ImportError:
    print("no torch: the PyTorch comparison is skipped")
    sys.exit(1 if bad else 0)
net = torch.nn.Sequential(torch.nn.Linear(13, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
state = {k: torch.tensor(tensor(k)[0]).reshape(head[k]["shape"]) for k in head}
net.load_state_dict(state, strict=True)
mean_t, std_t = torch.tensor(mean), torch.tensor(std)
std_t = torch.where(std_t < 1e-12, torch.ones_like(std_t), std_t)
with torch.no_grad():
    y = net((torch.tensor(X) - mean_t) / std_t)[:, 0].tolist()
for i in range(len(X)):
    if not close(got[i], y[i]):
        print("row %d: netc %g, PyTorch %g" % (i + 1, got[i], y[i]))
        bad += 1
print("PyTorch agrees" if not bad else "")
sys.exit(1 if bad else 0)
PY
out=$("$PYTHON" "$WORK/ref.py" "$WORK/w.safetensors" "$WORK/rows.data" "$WORK/pred.csv" 2>&1)
check "[ $? -eq 0 ]" "--predict against the file's weights and statistics: $out"
echo "serve.sh: $out"

# weights without statistics (saved by PyTorch, say): computed from the
# training data as training computes them, with a warning; the same
# predictions
cat > "$WORK/meta.py" <<'PY'
import json, struct, sys
src, dst, meta = sys.argv[1:4]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head["__metadata__"] = dict(head["__metadata__"], **json.loads(meta))
head["__metadata__"] = {k: v for k, v in head["__metadata__"].items() if v is not None}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
"$PYTHON" "$WORK/meta.py" "$WORK/w.safetensors" "$WORK/bare.safetensors" \
    '{"standardize_mean": null, "standardize_std": null}'
"$WORK/bos" --load "$WORK/bare.safetensors" --predict "$WORK/rows.data" -o "$WORK/bare.csv" \
    2> "$WORK/bare.err"
check "[ $? -eq 0 ] && grep -q 'holds no standardization statistics' '$WORK/bare.err'" \
    "weights without statistics: $(cat "$WORK/bare.err")"
check "cmp -s '$WORK/pred.csv' '$WORK/bare.csv'" "statistics computed again predict otherwise"
"$WORK/bos" --load "$WORK/bare.safetensors" --predict "$WORK/rows.data" --data "$WORK/nowhere" \
    > /dev/null 2> "$WORK/nodata.err"
check "[ $? -eq 1 ] && grep -q 'nowhere' '$WORK/nodata.err'" "no training data: $(cat "$WORK/nodata.err")"

# statistics in a file are checked as input
"$PYTHON" "$WORK/meta.py" "$WORK/w.safetensors" "$WORK/neg.safetensors" \
    '{"standardize_std": "[-1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"}'
"$PYTHON" "$WORK/meta.py" "$WORK/w.safetensors" "$WORK/short.safetensors" \
    '{"standardize_mean": "[0, 1]"}'
"$WORK/bos" --load "$WORK/short.safetensors" --predict "$WORK/rows.data" > /dev/null 2> "$WORK/short.err"
check "[ $? -eq 1 ] && grep -q \"short.safetensors: metadata 'standardize_mean' is not one: expected a JSON array of 13 numbers\" '$WORK/short.err'" \
    "too few means in the file: $(cat "$WORK/short.err")"
"$WORK/bos" --load "$WORK/neg.safetensors" --predict "$WORK/rows.data" > /dev/null 2> "$WORK/neg.err"
check "[ $? -eq 1 ] && grep -q \"neg.safetensors: the standardization's std of feature 0\" '$WORK/neg.err'" \
    "a negative std in the file: $(cat "$WORK/neg.err")"

# a checkpoint keeps them, and a resumed run ends as an unbroken one
"$WORK/bos" --quiet --max-steps 20 --checkpoint "$WORK/ck"
"$WORK/bos" --quiet --resume "$WORK/ck" --save "$WORK/resumed.safetensors"
check "cmp -s '$WORK/w.safetensors' '$WORK/resumed.safetensors'" \
    "a resumed run saves other weights or statistics"

# --predict's input: a header is told by the content, not by the model's
# header= (airline_rnn's is 1); the label column may be there or not; each
# row carries its line number
compile "$SRC/models/airline_rnn.net" "$WORK/air"
(cd "$SRC" && "$WORK/air" --quiet --max-steps 0 --save "$WORK/air.safetensors")
sed -n 2,3p "$SRC/data/airline_test.csv" > "$WORK/two.csv"
sed -n 2p "$SRC/data/airline_test.csv" > "$WORK/one.csv"
sed -n 1,3p "$SRC/data/airline_test.csv" | cut -d, -f1-12 > "$WORK/features.csv"
for f in two one features; do
    "$WORK/air" --load "$WORK/air.safetensors" --predict "$WORK/$f.csv" > "$WORK/$f.out" 2> "$WORK/$f.err"
done
check "[ \"\$(cut -d, -f1 '$WORK/two.out' | tr '\n' ' ')\" = 'line 1 2 ' ]" \
    "2 rows without a header: $(cat "$WORK/two.out" "$WORK/two.err")"
check "[ \"\$(cut -d, -f1 '$WORK/one.out' | tr '\n' ' ')\" = 'line 1 ' ]" \
    "1 row without a header: $(cat "$WORK/one.out" "$WORK/one.err")"
check "[ \"\$(cut -d, -f1 '$WORK/features.out' | tr '\n' ' ')\" = 'line 2 3 ' ] &&
    [ \"\$(tail -n +2 '$WORK/features.out' | cut -d, -f2)\" = \"\$(tail -n +2 '$WORK/two.out' | cut -d, -f2)\" ]" \
    "a header and features alone: $(cat "$WORK/features.out" "$WORK/features.err")"

# the C API: the same predictions
CC=${NETC_CC:-cc}
mkdir -p "$WORK/bos_lib"
"$NETC" --emit=lib --no-cuda "$WORK/bos.net" -o "$WORK/bos_lib/bos"
# shellcheck disable=SC2086
$CC -std=c11 -O2 -Wall -Wextra -Werror -I"$SRC/runtime" -I"$WORK/bos_lib" \
    "$SRC/tests/embed/predict_boston.c" "$WORK/bos_lib/bos.c" "$BUILD/runtime/libnetrt.a" \
    -fopenmp -lm -o "$WORK/predict_boston" 2> "$WORK/cc.err"
check "[ $? -eq 0 ]" "predict_boston does not build: $(head -5 "$WORK/cc.err")"
"$WORK/predict_boston" "$WORK/w.safetensors" "$WORK/rows.data" > "$WORK/lib.out" 2> "$WORK/lib.err"
check "[ $? -eq 0 ]" "predict_boston: $(cat "$WORK/lib.err")"
tail -n +2 "$WORK/pred.csv" | cut -d, -f2 > "$WORK/pred.values"
check "cmp -s '$WORK/lib.out' '$WORK/pred.values'" \
    "the C API predicts $(tr '\n' ' ' < "$WORK/lib.out"), --predict $(tr '\n' ' ' < "$WORK/pred.values")"

finish
