#!/usr/bin/env python3
"""Interoperability of runtime/safetensors.c with the safetensors library.

    safetensors_interop.py --write FILE
        Writes FILE with safetensors.numpy.save_file: "a" [2, 3] = 0..5 and
        "b.weight" [4] = 1.5 * i, float32; `test_safetensors --read FILE`
        checks it.

    safetensors_interop.py --read FILE
        Checks FILE as `test_safetensors --write FILE` wrote it.

    safetensors_interop.py PROGRAM
        Both directions with PROGRAM, the test_safetensors binary, in a
        temporary directory.

Exits 0 on success, 1 on failure, 77 (skipped) when numpy or safetensors
cannot be imported.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    import safetensors.numpy
except ImportError as e:
    print(f"safetensors_interop: skipped ({e})")
    sys.exit(77)


def write(path):
    safetensors.numpy.save_file(
        {
            "a": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b.weight": (1.5 * np.arange(4)).astype(np.float32),
        },
        path,
    )


def read(path):
    """The tensors and metadata test_safetensors --write puts in path."""
    want = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b.weight": (1.5 * np.arange(4)).astype(np.float32),
        "s": np.array(42.5, dtype=np.float32),
        "w4": (0.25 * np.arange(12) - 1).astype(np.float32).reshape(2, 1, 2, 3),
        "esc\"ape\\\n\u00e9": np.array([7], dtype=np.float32),
    }
    got = safetensors.numpy.load_file(path)
    problems = []
    if set(got) != set(want):
        problems.append(f"tensors {sorted(got)}, expected {sorted(want)}")
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            continue
        if g.dtype != np.float32 or g.shape != w.shape:
            problems.append(f"{name!r}: {g.dtype} {g.shape}, expected "
                            f"float32 {w.shape}")
        elif not np.array_equal(g, w):
            problems.append(f"{name!r}: values {g.ravel()}, expected "
                            f"{w.ravel()}")
    with safetensors.safe_open(path, "np") as f:
        meta = f.metadata()
    if meta != {"format": "pt", "note": 'x"y'}:
        problems.append(f"metadata {meta!r}")
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8:
        problems.append(f"header length {n} is not a multiple of 8")
    # The header lists tensors in the order they were given.
    order = ["a", "b.weight", "s", "w4", "esc\"ape\\\n\u00e9"]
    header = raw[8:8 + n].decode("utf-8")
    pos = [header.find(_json(name) + ":") for name in order]
    if sorted(pos) != pos or -1 in pos:
        problems.append(f"tensor order in the header: {header!r}")
    return problems


def _json(name):
    """name as netrt writes it: control characters as \\u00XX, UTF-8 and
    everything else verbatim."""
    s = json.dumps(name, ensure_ascii=False)
    for c in range(0x20):
        s = s.replace(json.dumps(chr(c))[1:-1], f"\\u{c:04x}")
    return s


def main(argv):
    if len(argv) == 3 and argv[1] == "--write":
        write(argv[2])
        return 0
    if len(argv) == 3 and argv[1] == "--read":
        problems = read(argv[2])
        for p in problems:
            print(f"safetensors_interop: {argv[2]}: {p}", file=sys.stderr)
        return 1 if problems else 0
    if len(argv) == 2 and not argv[1].startswith("-"):
        prog = os.path.abspath(argv[1])
        with tempfile.TemporaryDirectory() as d:
            py = os.path.join(d, "from_python.safetensors")
            c = os.path.join(d, "from_c.safetensors")
            write(py)
            r1 = subprocess.run([prog, "--read", py]).returncode
            r2 = subprocess.run([prog, "--write", c]).returncode
            problems = read(c) if r2 == 0 else ["test_safetensors --write "
                                               "failed"]
            for p in problems:
                print(f"safetensors_interop: {p}", file=sys.stderr)
            ok = r1 == 0 and not problems
            print(f"safetensors_interop: python -> C {'ok' if r1 == 0 else 'FAILED'}, "
                  f"C -> python {'ok' if not problems else 'FAILED'}")
            return 0 if ok else 1
    print("usage: safetensors_interop.py --write FILE | --read FILE | "
          "PROGRAM", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
