#!/usr/bin/env python3
"""bench/gpu/sass.py — what the GPU will run, read without a GPU.

For each model named, netc writes its kernel source (--emit=cuda), nvcc
compiles it to a cubin for one architecture (sm_90 unless ARCH says) and
cuobjdump disassembles it.  For every convolution kernel (conv2d_*_fwd,
_dw, _dx) the report gives ptxas's registers and spills and, for each of
its main loops (a backward branch over a loop holding the tensor cores'
HMMA, or 64 FFMAs or more), the instructions one trip runs: fp32's loop
over a slice of k, and bf16's and fp16's, whose HMMA count says how many
16 x 8 x 16 products a warp does for them, and its LDSM/LDS counts how it
reads its operands.  A proxy for speed (a loop bound by its loads issues
most of its instructions for them), not a timing: bench/gpu/run.sh times.

Usage: bench/gpu/sass.py MODEL.net...  (from the source tree, after make)
Environment: NETC (./netc), NVCC (nvcc), CUOBJDUMP (cuobjdump: in the CUDA
toolkit, or `pip download nvidia-cuda-cuobjdump` and unzip the wheel),
ARCH (sm_90).
"""
import os
import re
import subprocess
import sys
import tempfile

KERNEL = re.compile(r"conv2d_.*_(fwd|dw|dx)$")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def loops(body):
    """Each main loop of a kernel's (address, instruction) list."""
    out = []
    for addr, text in body:
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        start = int(m.group(1), 16)
        trip = [t for a, t in body if start <= a <= addr]
        ops = [t.split()[1] if t.startswith("@") else t.split()[0] for t in trip]
        hmma = sum(o.startswith("HMMA") for o in ops)
        ffma = sum(o.startswith("FFMA") for o in ops)
        if not hmma and ffma < 64:
            continue
        kind = ("bf16" if any("BF16" in t for t in trip) else "fp16") if hmma else "fp32"
        count = {k: sum(o.split(".")[0] == k for o in ops) for k in ("LDSM", "LDS", "LDG", "STS")}
        out.append("%s %d (%s, LDSM %d, LDS %d, LDG %d, STS %d)" % (
            kind, len(trip), "%d HMMA" % hmma if hmma else "%d FFMA" % ffma,
            count["LDSM"], count["LDS"], count["LDG"], count["STS"]))
    return out


def report(model, tmp):
    netc = os.environ.get("NETC", "./netc")
    nvcc = os.environ.get("NVCC", "nvcc")
    arch = os.environ.get("ARCH", "sm_90")
    cu, cubin = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
    run([netc, "--emit=cuda", model, "-o", cu])
    ptxas = run([nvcc, "-arch=" + arch, "-cubin", "-O3", "-std=c++17", "-Itemplates",
                 "-Iruntime", "-Iruntime/cuda", "-Xptxas", "-v", "-o", cubin, cu]).stderr
    sass = run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", cubin]).stdout
    regs, fn = {}, None
    for line in ptxas.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w]+)", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and fn:
            regs.setdefault(fn, {})["spill"] = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            regs.setdefault(fn, {})["regs"] = m.group(1)
    kernels, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            kernels[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and cur:
            kernels[cur].append((int(m.group(1), 16), m.group(2)))
    print("## %s (%s)\n" % (model, arch))
    print("| kernel | registers | spilled bytes | main loops: instructions a trip |")
    print("|---|---:|---:|---|")
    for name in sorted(k for k in kernels if KERNEL.search(k)):
        r = regs.get(name, {})
        trips = "; ".join(loops(kernels[name])) or "none (k in one slice)"
        print("| %s | %s | %s | %s |" % (name, r.get("regs", "?"), r.get("spill", "?"), trips))
    print()


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: bench/gpu/sass.py MODEL.net...")
    with tempfile.TemporaryDirectory() as tmp:
        for model in sys.argv[1:]:
            try:
                report(model, tmp)
            except (OSError, subprocess.CalledProcessError) as e:
                err = getattr(e, "stderr", "") or ""
                sys.exit("sass.py: %s: %s\n%s" % (model, e, err[-2000:]))


if __name__ == "__main__":
    main()
