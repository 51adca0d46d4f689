#!/usr/bin/env python3
"""netc's TensorBoard event files read back by TensorBoard itself.

    tfevents_check.py DIR EXPECT.json

Reads every event file of DIR (the files whose name holds "tfevents", as
`tensorboard --logdir` finds them; not subdirectories) with the tensorboard
package's EventAccumulator, keeping every scalar (size guidance 0), and
compares the scalars with EXPECT.json, an object mapping each tag to the
list of its [step, value] pairs in the order they were written:

    {"train/loss": [[1, 0.5], [2, 0.25]], "test/accuracy": [[2, 0.875]]}

Values are compared as float32, exactly: the expected number rounded to
float32 (as struct.pack("<f") rounds it; past the largest float, infinity,
as the C writer does) must be the same float32, bit for bit, as the file's
simple_value, except that any NaN matches any NaN.  A value may also be
given as the string "nan", "inf" or "-inf", since JSON has no such numbers.
Steps must be equal; a tag in the files that is not expected, or expected
and not in the files, is a difference too.

TensorBoard itself is lenient in ways this check must not be: a record
whose CRC is wrong or that is truncated ends the reading of its file
silently (logged at debug level), so a broken file shows here as missing
scalars, never as an error of its own.

Prints each difference and exits 1; or prints
"tfevents_check: N scalars in M tags ok" and exits 0.  Exits 77 (the
automake code for a skipped test) if the tensorboard package cannot be
imported, and 2 on a usage error or an unreadable EXPECT.json.
"""

import json
import math
import os
import struct
import sys

MAX_SHOWN = 50  # the most differences printed
PER_TAG = 5  # the most differing scalars of one tag printed


def f32_bits(x):
    """x rounded to float32, as its 4 bytes; None for NaN."""
    if math.isnan(x):
        return None
    try:
        return struct.pack("<f", x)
    except OverflowError:  # rounds past the largest float
        return struct.pack("<f", math.copysign(math.inf, x))


def load_expect(path):
    """EXPECT.json as {tag: [(step, value), ...]}; exits 2 if malformed."""

    def bad(why):
        print("tfevents_check: %s: %s" % (path, why), file=sys.stderr)
        sys.exit(2)

    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        bad(str(e))
    if not isinstance(raw, dict):
        bad("not an object mapping tags to [step, value] lists")
    expect = {}
    for tag, pairs in raw.items():
        if not isinstance(pairs, list):
            bad("%r: not a list of [step, value] pairs" % tag)
        out = []
        for i, p in enumerate(pairs):
            if (
                not isinstance(p, list)
                or len(p) != 2
                or not isinstance(p[0], int)
                or isinstance(p[0], bool)
                or not isinstance(p[1], (int, float, str))
                or isinstance(p[1], bool)
            ):
                bad("%r[%d]: not a [step, value] pair: %r" % (tag, i, p))
            try:
                value = float(p[1])
            except ValueError:
                bad("%r[%d]: not a number: %r" % (tag, i, p[1]))
            out.append((p[0], value))
        expect[tag] = out
    return expect


def load_scalars(logdir, event_accumulator):
    """DIR's scalars as TensorBoard sees them: {tag: [(step, value), ...]}."""
    acc = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()[event_accumulator.SCALARS]
    }


def compare(got, expect):
    """The differences between got and expect, as lines: per tag, the
    count if it differs and the first PER_TAG differing scalars (after a
    lost record every later one differs)."""
    diffs = []
    for tag in sorted(set(got) - set(expect)):
        diffs.append("%r: in the files (%d scalars), not expected"
                     % (tag, len(got[tag])))
    for tag in sorted(set(expect) - set(got)):
        diffs.append("%r: expected (%d scalars), not in the files"
                     % (tag, len(expect[tag])))
    for tag in sorted(set(got) & set(expect)):
        g, e = got[tag], expect[tag]
        if len(g) != len(e):
            diffs.append("%r: %d scalars in the files, %d expected"
                         % (tag, len(g), len(e)))
        bad = []
        for i, ((gs, gv), (es, ev)) in enumerate(zip(g, e)):
            want = f32_bits(ev)
            if gs != es or f32_bits(gv) != want:
                as_f32 = struct.unpack("<f", want)[0] if want else ev
                bad.append("%r[%d]: step %d value %r, expected step %d value "
                           "%r (float32 %r)" % (tag, i, gs, gv, es, ev, as_f32))
        diffs += bad[:PER_TAG]
        if len(bad) > PER_TAG:
            diffs.append("%r: ... and %d more differing scalars"
                         % (tag, len(bad) - PER_TAG))
    return diffs


def main(argv):
    if len(argv) != 3:
        print("usage: tfevents_check.py DIR EXPECT.json", file=sys.stderr)
        return 2
    logdir, expect_path = argv[1], argv[2]
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("tfevents_check: the tensorboard package is not installed")
        return 77
    expect = load_expect(expect_path)

    # EventAccumulator takes a missing or empty directory for an empty run;
    # here that is an error worth its own message.
    if not os.path.isdir(logdir):
        print("tfevents_check: %s: not a directory" % logdir)
        return 1
    files = sorted(n for n in os.listdir(logdir) if "tfevents" in n)
    if not files:
        print("tfevents_check: %s: no event files" % logdir)
        return 1

    got = load_scalars(logdir, event_accumulator)
    diffs = compare(got, expect)
    if diffs:
        for d in diffs[:MAX_SHOWN]:
            print("tfevents_check: " + d)
        if len(diffs) > MAX_SHOWN:
            print("tfevents_check: ... and %d more lines"
                  % (len(diffs) - MAX_SHOWN))
        print("tfevents_check: %s (%d event files) differs from %s"
              % (logdir, len(files), expect_path))
        return 1
    n = sum(len(v) for v in got.values())
    print("tfevents_check: %d scalars in %d tags ok" % (n, len(got)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
