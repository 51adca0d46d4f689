#!/usr/bin/env python3
"""Renders the bundled handwritten digits (data/optdigits.*) as PNG files
with image-list CSVs: the tiny image set that models/cnn101.net trains on
and the tests read.

    scripts/make-digit-images.py [--src data] [--out data/digit_images]

Each 8x8 digit (counts 0..16) is drawn at a size between 20 and 44 pixels
(so that resize(32, 32) both shrinks and enlarges), in a colour on a
background of another, and written as an RGB PNG; every seventh image is
written grey, every eleventh with an alpha channel, so that the loader's
conversions are used.  The lists are the PyTorch scripts' desc_*.csv:
a `path,label` header, then one row an image, paths relative to the list.

    OUT/desc_train.csv  500 images from optdigits.tra, 50 of each digit
    OUT/desc_valid.csv  100 more from optdigits.tra, 10 of each
    OUT/desc_test.csv   200 from optdigits.tes, 20 of each

The output depends on nothing but the data files: the same bytes every
run (a fixed seed, zlib level 9, no timestamps in the PNGs).  Only the
standard library is used.
"""
import argparse
import os
import random
import struct
import zlib


def png(width, height, channels, rows):
    """A PNG file's bytes: 8-bit grey (1), RGB (3) or RGBA (4) rows."""
    ctype = {1: 0, 3: 2, 4: 6}[channels]

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\0" + bytes(r) for r in rows)  # filter 0 on every row
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b""))


def render(counts, size, fg, bg, channels):
    """The 8x8 counts drawn at size x size: each pixel takes its block's
    count, blended from bg (0) to fg (16)."""
    rows = []
    for y in range(size):
        row = []
        for x in range(size):
            t = counts[(y * 8 // size) * 8 + x * 8 // size] / 16.0
            rgb = [round(b + (f - b) * t) for f, b in zip(fg, bg)]
            if channels == 1:
                row.append(round(sum(rgb) / 3))
            else:
                row.extend(rgb)
                if channels == 4:
                    row.append(255 - (x + y) % 64)
        rows.append(row)
    return rows


def read_digits(path):
    out = []
    with open(path) as f:
        for line in f:
            v = [int(s) for s in line.split(",")]
            out.append((v[:64], v[64]))
    return out


def pick(digits, per_class, skip):
    """per_class digits of each class, after the first skip of each."""
    seen, chosen = [0] * 10, []
    for counts, label in digits:
        seen[label] += 1
        if skip < seen[label] <= skip + per_class:
            chosen.append((counts, label))
    return chosen


def write_set(out, name, digits, rng):
    os.makedirs(os.path.join(out, name), exist_ok=True)
    lines = ["path,label"]
    for i, (counts, label) in enumerate(digits):
        size = rng.randint(20, 44)
        fg = [rng.randint(150, 255) for _ in range(3)]
        bg = [rng.randint(0, 90) for _ in range(3)]
        channels = 1 if i % 7 == 3 else 4 if i % 11 == 5 else 3
        rel = "%s/%04d.png" % (name, i)
        with open(os.path.join(out, rel), "wb") as f:
            f.write(png(size, size, channels, render(counts, size, fg, bg, channels)))
        lines.append("%s,%d" % (rel, label))
    with open(os.path.join(out, "desc_%s.csv" % name), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default="data")
    ap.add_argument("--out", default="data/digit_images")
    a = ap.parse_args()
    tra = read_digits(os.path.join(a.src, "optdigits.tra"))
    tes = read_digits(os.path.join(a.src, "optdigits.tes"))
    rng = random.Random(101)
    write_set(a.out, "train", pick(tra, 50, 0), rng)
    write_set(a.out, "valid", pick(tra, 10, 50), rng)
    write_set(a.out, "test", pick(tes, 20, 0), rng)


if __name__ == "__main__":
    main()
