#!/bin/sh
# tests/images.sh — image datasets: lists of image files, their transforms,
# the loader that flips training batches, and what goes wrong with them.
# (tests/pytorch.sh checks the pixels: cnn101 on the bundled PNGs trains as
# torchvision's Resize, RandomHorizontalFlip, ToTensor and Normalize make
# its batches, step for step.)
#
#  - lists: a header or none, CRLF, blank lines, quoted paths with commas,
#    absolute paths, root=; folders of class folders, as ImageFolder reads
#    them; grey and RGB inputs from grey, RGB and RGBA files; JPEG (written
#    by PIL, when there is one);
#  - the batches do not depend on --workers, and a run stopped mid-epoch
#    and resumed flips what an unbroken one flips: same losses, same bytes;
#  - a missing or undecodable image stops the run naming the list's line
#    and the file, or with --skip-bad is left out and counted at the end;
#    bad labels and images of the wrong size name the line too;
#  - --predict takes a list, or one image file; its classes give --eval's
#    accuracy.
# NETC_TRAIN_DEVICE=cuda runs it on a GPU (tests/gpu/run.sh does).
. "${NETC_TOP_SRCDIR:-.}/tests/lib.sh"
DEV=${NETC_TRAIN_DEVICE:-cpu}
IMG=$(cd "$SRC/data/digit_images" && pwd)

model() { # NAME INPUT EXTRA-STATEMENTS
    cat > "$WORK/$1.net" <<NET
model $1 {
    input  image$2
    target class(10)
    conv2d(8, kernel=3, padding=1)
    relu
    maxpool2d(2)
    flatten
    linear(10)
    loss      cross_entropy
    optimizer sgd(lr=0.05, momentum=0.9)
    device    $DEV
    train     images("$WORK/train.csv") batch 16 epochs 3 seed 5
    test      images("$IMG/desc_test.csv")
$3
}
NET
    compile "$WORK/$1.net" "$WORK/$1"
}
field() { grep "\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p"; }
steps() { grep '"step"' "$1" | sed 's/, "seconds".*//'; }

# every fourth of the bundled training images (125, all digits), listed
# with absolute paths
awk 'NR == 1 || NR % 4 == 2' "$IMG/desc_train.csv" | sed "2,\$s|^|$IMG/|" > "$WORK/train.csv"

model rgb "[3, 16, 16]" '    transform resize(16, 16)
    transform random_horizontal_flip(p=0.5)
    transform to_tensor
    transform normalize(mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))'
if "$WORK/rgb" --epochs 1 --max-steps 1 --quiet 2>&1 | grep -q 'built without stb_image'; then
    skip "the runtime was built without stb_image"
fi

# ------------------------------------------------------------ training
"$WORK/rgb" --metrics "$WORK/w1.jsonl" --log-every 1 --workers 1 --save "$WORK/w1.safetensors" > "$WORK/rgb.out"
st=$?
check "[ $st -eq 0 ]" "rgb: the run failed: $(cat "$WORK/rgb.out")"
check "grep -q '125 training samples, 200 test' '$WORK/rgb.out'" "rgb: $(head -n 1 "$WORK/rgb.out")"
acc=$(field "$WORK/w1.jsonl" test_accuracy)
check "awk 'BEGIN { exit !($acc > 0.3) }'" "rgb: test accuracy $acc after 3 epochs of 125 images"
"$WORK/rgb" --metrics "$WORK/w4.jsonl" --log-every 1 --workers 4 --save "$WORK/w4.safetensors" --quiet
check "[ \"\$(steps '$WORK/w1.jsonl')\" = \"\$(steps '$WORK/w4.jsonl')\" ] &&
       cmp -s '$WORK/w1.safetensors' '$WORK/w4.safetensors'" \
    "--workers 1 and --workers 4: other losses or weights"
"$WORK/rgb" --metrics "$WORK/s2.jsonl" --log-every 1 --seed 6 --quiet
check "[ \"\$(steps '$WORK/w1.jsonl')\" != \"\$(steps '$WORK/s2.jsonl')\" ]" \
    "another seed: the same losses (are the flips drawn at all?)"

# stopped mid-epoch and resumed: the flips of an unbroken run
"$WORK/rgb" --max-steps 11 --checkpoint "$WORK/ck" --metrics "$WORK/cut.jsonl" --log-every 1 --quiet
"$WORK/rgb" --resume "$WORK/ck" --metrics "$WORK/cut.jsonl" --save "$WORK/cut.safetensors" \
    --log-every 1 --workers 3 --quiet
check "[ \"\$(steps '$WORK/w1.jsonl')\" = \"\$(steps '$WORK/cut.jsonl')\" ]" \
    "stopped at step 11 and resumed: other step losses than a run never stopped"
check "cmp -s '$WORK/w1.safetensors' '$WORK/cut.safetensors'" \
    "stopped at step 11 and resumed: other final weights"

# a grey input from RGB, RGBA and grey files, no transforms but resize
model grey "[1, 24, 24]" '    transform resize(24, 24)'
"$WORK/grey" --epochs 2 --quiet --metrics "$WORK/grey.jsonl"
st=$?
check "[ $st -eq 0 ] && [ -n \"\$(field '$WORK/grey.jsonl' test_loss)\" ]" "grey: the run failed"

# ---------------------------------------------------- pixels, as PIL's
# the bundled test list decoded, converted, resized (up and down) and made
# floats, against PIL and torchvision's Resize and ToTensor: equal, exactly
dump=$BUILD/tests/unit/test_images
if [ -x "$dump" ] && "$PYTHON" -c 'import PIL, torchvision' > /dev/null 2>&1; then
    for mode in "3 32 32" "1 28 20"; do
        set -- $mode
        "$dump" --dump "$IMG/desc_test.csv" "$1" "$2" "$3" "$2" "$3" "$WORK/px.f32"
        out=$("$PYTHON" - "$IMG" "$WORK/px.f32" "$1" "$2" "$3" <<'PY' 2>&1
import array, os, sys
import torch
from PIL import Image
from torchvision import transforms as T
root, dumped, c, h, w = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
rows = [ln.split(",")[0] for ln in open(os.path.join(root, "desc_test.csv")).read().split()[1:]]
tf = T.Compose([T.Resize((h, w)), T.ToTensor()])
want = torch.stack([tf(Image.open(os.path.join(root, p)).convert("L" if c == 1 else "RGB"))
                    for p in rows])
got = torch.tensor(array.array("f", open(dumped, "rb").read())).reshape(want.shape)
bad = (got != want).sum().item()
print(f"{bad} of {want.numel()} values differ; max {(got - want).abs().max().item():g}")
sys.exit(1 if bad else 0)
PY
)
        st=$?
        check "[ $st -eq 0 ]" "[$1, $2, $3] from the bundled PNGs: not PIL's pixels: $out"
    done
fi

# ---------------------------------------------------------------- lists
# no header, CRLF, blank lines, a quoted path holding a comma, root=
mkdir -p "$WORK/dir, with comma"
cp "$IMG/train/0000.png" "$WORK/dir, with comma/a.png"
cp "$IMG/train/0060.png" "$WORK/dir, with comma/b.png"
printf '"dir, with comma/a.png",0\r\n\r\n  "dir, with comma/b.png" , 1\r\n' > "$WORK/odd.csv"
reads_two() { # NAME WHAT: $WORK/NAME.csv, of two images, trains and tests
    "$WORK/rgb" --data "$WORK/$1.csv" --test-data "$WORK/$1.csv" --epochs 1 --quiet \
        --metrics "$WORK/$1.jsonl" 2> "$WORK/$1.err"
    st=$?
    check "[ $st -eq 0 ] && grep -q '\"test_samples\": 2' '$WORK/$1.jsonl'" \
        "$2: $(cat "$WORK/$1.err")"
}
reads_two odd "a list without a header, with CRLF, a blank line and quoted paths"
{ echo file,class; tail -n +2 "$IMG/desc_train.csv" | head -n 40; } > "$WORK/rel.csv"
sed 's|images("[^"]*/train.csv")|images("'"$WORK"'/rel.csv", root="'"$IMG"'")|' "$WORK/rgb.net" > "$WORK/root.net"
compile "$WORK/root.net" "$WORK/root"
"$WORK/root" --epochs 1 --quiet --metrics "$WORK/root.jsonl" 2> "$WORK/root.err"
st=$?
check "[ $st -eq 0 ]" "images(LIST, root=DIR): $(cat "$WORK/root.err")"

# a folder of class folders, read as torchvision's ImageFolder reads it:
# classes in name order, each one's images at any depth, sorted as
# sorted(os.walk()) sorts them, other files left out
mkdir -p "$WORK/folder"
tail -n +2 "$WORK/train.csv" | while IFS=, read -r p lab; do
    mkdir -p "$WORK/folder/digit_$lab"
    cp "$p" "$WORK/folder/digit_$lab/"
done
set -- "$WORK"/folder/digit_3/*.png
mkdir -p "$WORK/folder/digit_3/sub" "$WORK/folder/digit_3/a0/deeper"
mv "$1" "$WORK/folder/digit_3/sub/"
mv "$2" "$WORK/folder/digit_3/a0/"
cp "$3" "$WORK/folder/digit_3/A.PNG"
cp "$3" "$WORK/folder/digit_3/a0/deeper/z.png"
echo notes > "$WORK/folder/digit_3/readme.txt"
"$WORK/rgb" --data "$WORK/folder" --no-shuffle --epochs 1 --log-every 1 --quiet \
    --metrics "$WORK/fold.jsonl" 2> "$WORK/fold.err"
st=$?
check "[ $st -eq 0 ] && [ \$(grep -c '\"step\"' '$WORK/fold.jsonl') -eq 8 ]" \
    "a folder of class folders: $(cat "$WORK/fold.err")"
if "$PYTHON" -c 'import torchvision' > /dev/null 2>&1; then
    "$PYTHON" -c 'import sys
from torchvision.datasets import ImageFolder
d = ImageFolder(sys.argv[1])
open(sys.argv[2], "w").write("path,label\n" + "".join(f"{p},{c}\n" for p, c in d.samples))' \
        "$WORK/folder" "$WORK/folder.csv"
    "$WORK/rgb" --data "$WORK/folder.csv" --no-shuffle --epochs 1 --log-every 1 --quiet \
        --metrics "$WORK/foldcsv.jsonl"
    check "[ \"\$(steps '$WORK/fold.jsonl')\" = \"\$(steps '$WORK/foldcsv.jsonl')\" ]" \
        "a folder: other samples, labels or order than ImageFolder's list gives"
fi
mv "$WORK/folder/digit_9" "$WORK/digit_9"
mkdir -p "$WORK/folder/digit_9/empty"
"$WORK/rgb" --data "$WORK/folder" --epochs 1 --quiet 2> "$WORK/fold.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'folder/digit_9: no image files in the class folder' '$WORK/fold.err'" \
    "a class folder without images: $(cat "$WORK/fold.err")"
rm -r "$WORK/folder/digit_9"
mv "$WORK/digit_9" "$WORK/folder/digit_9"
mkdir -p "$WORK/folder/digit_9x" "$WORK/folder/digit_9y"
cp "$3" "$WORK/folder/digit_9x/"
cp "$3" "$WORK/folder/digit_9y/"
"$WORK/rgb" --data "$WORK/folder" --epochs 1 --quiet 2> "$WORK/fold.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'folder: 12 class folders (digit_0 to digit_9y), but the model has 10 classes' '$WORK/fold.err'" \
    "more class folders than classes: $(cat "$WORK/fold.err")"

# JPEG, written by PIL
if "$PYTHON" -c 'import PIL' > /dev/null 2>&1; then
    "$PYTHON" -c 'import sys; from PIL import Image
for i, src in enumerate(sys.argv[2:]):
    Image.open(src).convert("RGB").save("%s/%d.jpg" % (sys.argv[1], i), quality=90)' \
        "$WORK" "$IMG/train/0001.png" "$IMG/train/0070.png"
    printf '0.jpg,0\n1.jpg,1\n' > "$WORK/jpeg.csv"
    reads_two jpeg "JPEG files"
fi

# ---------------------------------------------------------- bad input
expect() { # WHAT-STDERR-SAYS FLAGS...: the run fails, saying so
    want=$1
    shift
    "$WORK/rgb" --epochs 1 --quiet "$@" > "$WORK/bad.out" 2> "$WORK/bad.err"
    status=$?
    check "[ $status -ne 0 ] && [ $status -lt 128 ] && grep -qF -- \"$want\" '$WORK/bad.err'" \
        "$* (exit $status): expected '$want', got: $(cat "$WORK/bad.err")"
}
bad() { # LINES...: a list of the first training images and these lines
    head -n 5 "$WORK/train.csv" > "$WORK/bad.csv"
    for l in "$@"; do printf '%s\n' "$l" >> "$WORK/bad.csv"; done
}
bad "$WORK/nope.png,3"
expect "bad.csv:6: $WORK/nope.png: cannot open: No such file or directory" --data "$WORK/bad.csv"
echo 'not a picture' > "$WORK/text.png"
bad "$WORK/text.png,3"
expect "bad.csv:6: $WORK/text.png: not an image stb_image can read" --data "$WORK/bad.csv"
head -c 100 "$IMG/train/0002.png" > "$WORK/cut.png"
bad "$WORK/cut.png,1"
expect "bad.csv:6: $WORK/cut.png: not an image" --data "$WORK/bad.csv"
bad "$IMG/train/0002.png,10"
expect "bad.csv:6: label 10 is out of range: the model has 10 classes, 0 to 9" --data "$WORK/bad.csv"
bad "$IMG/train/0002.png,two"
expect "bad.csv:6: label 'two' is not a whole number" --data "$WORK/bad.csv"
bad "$IMG/train/0002.png"
expect "bad.csv:6: no label: expected path,label" --data "$WORK/bad.csv"
bad "$IMG/train/0002.png,1,x"
expect "bad.csv:6: expected two fields, path,label" --data "$WORK/bad.csv"
bad '"unclosed.png,1'
expect "bad.csv:6: a quote is left open" --data "$WORK/bad.csv"
printf 'path,label\n' > "$WORK/empty.csv"
expect "empty.csv: no images listed" --data "$WORK/empty.csv"
expect "no-such.csv: cannot open" --data "$WORK/no-such.csv"
# the training list is decoded as the first epoch runs: a bad image at its
# end stops the run there, naming it, and no checkpoint is left behind
cp "$WORK/train.csv" "$WORK/late.csv"
echo "$WORK/text.png,3" >> "$WORK/late.csv"
"$WORK/rgb" --data "$WORK/late.csv" --checkpoint "$WORK/lateck" --log-every 1 \
    --metrics "$WORK/late.jsonl" > "$WORK/late.out" 2> "$WORK/late.err"
st=$?
check "[ $st -eq 1 ] && grep -q 'late.csv:127: $WORK/text.png: not an image' '$WORK/late.err'" \
    "a bad image at the end of the training list (exit $st): $(cat "$WORK/late.err")"
check "! grep -q '^trained' '$WORK/late.out' && [ -z \"\$(ls -A '$WORK/lateck' 2>/dev/null)\" ]" \
    "after a bad training image: a run said it trained, or left a checkpoint: $(ls -A "$WORK/lateck" 2>&1)"
# the test list is read whole too, and named
bad "$WORK/nope.png,3"
expect "nope.png: cannot open" --test-data "$WORK/bad.csv"

# without resize, every image must be the input's size (the test set is
# read whole before training; the training set as the first epoch runs)
sed '/transform resize/d' "$WORK/rgb.net" > "$WORK/nores.net"
compile "$WORK/nores.net" "$WORK/nores"
"$WORK/nores" --epochs 1 --quiet 2> "$WORK/nores.err"
st=$?
echo "desc_test.csv:2: $IMG/test/0000.png: is 24x24 pixels, but the model's input is 16x16: add 'transform resize(16, 16)' to the model" > "$WORK/nores.want"
check "[ $st -ne 0 ] && grep -qF -f '$WORK/nores.want' '$WORK/nores.err'" \
    "an image of another size without resize: $(cat "$WORK/nores.err")"

# --skip-bad: the bad ones left out, counted at the end, the run goes on
bad "$WORK/nope.png,3" "$WORK/text.png,4" "$IMG/train/0003.png,0"
"$WORK/rgb" --epochs 1 --data "$WORK/bad.csv" --skip-bad --metrics "$WORK/skip.jsonl" \
    > "$WORK/skip.out" 2> "$WORK/skip.err"
st=$?
check "[ $st -eq 0 ]" "--skip-bad: the run failed: $(cat "$WORK/skip.err")"
check "grep -q '^model rgb: .* 5 training samples' '$WORK/skip.out'" \
    "--skip-bad: 2 of 7 images bad, 5 should be left: $(head -n 1 "$WORK/skip.out")"
check "grep -q 'warning: 2 images could not be read and were left out; the first: .*bad.csv:6: $WORK/nope.png: cannot open' '$WORK/skip.err'" \
    "--skip-bad: no count at the end: $(cat "$WORK/skip.err")"
check "[ \"\$(tail -n 1 '$WORK/skip.err' | grep -c warning)\" -eq 1 ]" \
    "--skip-bad: the warning is not the last thing said"
bad "$WORK/nope.png,3"
sed -n '1p;6p' "$WORK/bad.csv" > "$WORK/allbad.csv"
expect "allbad.csv: none of its 1 images could be read" --data "$WORK/allbad.csv" --skip-bad

# ------------------------------------------------------ eval and predict
"$WORK/rgb" --load "$WORK/w1.safetensors" --eval --metrics "$WORK/ev.jsonl" --quiet
check "[ \"\$(field '$WORK/ev.jsonl' test_loss)\" = \"\$(field '$WORK/w1.jsonl' test_loss)\" ]" \
    "--eval of the saved weights: another test loss than the training run's"
"$WORK/rgb" --load "$WORK/w1.safetensors" --predict "$IMG/desc_test.csv" -o "$WORK/pred.csv"
st=$?
check "[ $st -eq 0 ] && [ \$(wc -l < '$WORK/pred.csv') -eq 201 ]" \
    "--predict LIST: expected a header and 200 rows in $WORK/pred.csv"
check "[ \"\$(sed -n 7p '$WORK/pred.csv' | cut -d, -f1)\" = '$IMG/test/0005.png' ]" \
    "--predict LIST: a row does not begin with its image: $(sed -n 7p "$WORK/pred.csv" | cut -c1-80)"
tail -n +2 "$WORK/pred.csv" | cut -d, -f2 > "$WORK/p.txt"
tail -n +2 "$IMG/desc_test.csv" | cut -d, -f2 > "$WORK/l.txt"
right=$(paste -d' ' "$WORK/p.txt" "$WORK/l.txt" | awk '$1 == $2 { n++ } END { print n + 0 }')
check "awk 'BEGIN { exit !($right / 200 == $acc) }'" \
    "--predict's classes: $right of 200 right, but the test accuracy is $acc"
"$WORK/rgb" --load "$WORK/w1.safetensors" --predict "$IMG/test/0005.png" > "$WORK/one.csv"
st=$?
check "[ $st -eq 0 ] && [ \$(wc -l < '$WORK/one.csv') -eq 2 ] &&
       same_prediction \"\$(sed -n 2p '$WORK/one.csv')\" \"\$(sed -n 7p '$WORK/pred.csv')\"" \
    "--predict IMAGE: not the row --predict LIST gives it: $(cat "$WORK/one.csv") against $(sed -n 7p "$WORK/pred.csv")"
# a path with a comma, quoted as CSV wants
"$WORK/rgb" --load "$WORK/w1.safetensors" --predict "$WORK/odd.csv" > "$WORK/oddp.csv"
check "sed -n 2p '$WORK/oddp.csv' | grep -q '^\"$WORK/dir, with comma/a.png\",[0-9]'" \
    "--predict: a path holding a comma is not quoted: $(sed -n 2p "$WORK/oddp.csv" | cut -c1-80)"
finish
