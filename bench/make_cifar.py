#!/usr/bin/env python3
"""Write a synthetic file in the CIFAR-10 binary record format.

Each record is 1 label byte followed by 3072 pixel bytes (3x32x32,
channel-major), exactly as in data_batch_N.bin.  The content is
pseudo-random but deterministic (a function of --seed only), so every run of
the benchmark trains on the same bytes.  Python standard library only.

usage: make_cifar.py OUT --records N --classes K [--seed S]
"""
import argparse
import random
import sys

RECORD_PIXELS = 3 * 32 * 32


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="file to write")
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--classes", type=int, required=True,
                    help="labels are drawn from 0..classes-1 (at most 256)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.records < 1 or not 1 <= a.classes <= 256:
        ap.error("need --records >= 1 and 1 <= --classes <= 256")
    rng = random.Random(a.seed)
    with open(a.out, "wb") as f:
        for _ in range(a.records):
            f.write(bytes([rng.randrange(a.classes)]))
            f.write(rng.randbytes(RECORD_PIXELS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
