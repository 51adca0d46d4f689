#!/usr/bin/env python3
"""Where a generated program's training time goes, from a perf profile.

Reads the output of

    perf script -i FILE -F comm,tid,ip,sym,dso --inline

for a `perf record --call-graph dwarf` run of a netc-generated program
(compiled with NETC_CFLAGS="-O2 -g" so that the layer functions have names)
and prints two markdown tables over the samples taken inside training steps
(evaluation and data loading are left out): the share of each kernel (the
innermost real function: sgemm, im2col, col2im, maxpool, the layer's own
loops, ...) and the share of each layer function (conv2d_2_bwd, ...) with
its main kernels.  Samples on other threads (OpenMP workers) that are not in
a layer are counted under "(other thread)".  Standard library only.
"""
import collections
import re
import sys

LAYER = re.compile(r"^(conv2d|linear|maxpool2d|avgpool2d|relu|dropout|flatten)_\d+_(fwd|bwd)$")
GEMM = ("nrt_sgemm", "sgemm_", "cblas_sgemm", "gemm_", "ukernel", "scale_c", "store_row",
        "ld4", "st4", "alloc_floats", "block_size")
PACK = ("pack_", "tr8x8", "top12")
# Small helpers inlined into a kernel: the kernel is the next frame out.
HELPERS = ("valid_range", "pool_window", "round_up", "rotl")
KERNELS = {"nrt_im2col": "im2col", "nrt_col2im": "col2im",
           "nrt_maxpool2d_fwd": "maxpool fwd", "nrt_maxpool2d_bwd": "maxpool bwd",
           "nrt_avgpool2d": "avgpool", "nrt_xent": "cross-entropy", "nrt_loss": "loss",
           "nrt_optim_step": "optimizer step", "sgd": "optimizer step",
           "adam": "optimizer step", "nrt_dataset_gather": "batch gather",
           "nrt_rng": "dropout RNG"}


def kernel(sym, dso):
    if sym.startswith(PACK) or (sym.startswith(GEMM) and "copy" in sym):
        return "sgemm packing"
    if sym.startswith(GEMM):
        return "sgemm compute"
    for prefix, name in KERNELS.items():
        if sym.startswith(prefix):
            return name
    if "memset" in sym:
        return "memset"
    if "memmove" in sym or "memcpy" in sym:
        return "memcpy"
    if "libgomp" in dso or "sched_yield" in sym:
        return "OpenMP runtime (spin / wait / fork-join)"
    if "kernel.kallsyms" in dso:
        return "kernel (page faults, futex, ...)"
    if LAYER.match(sym):
        return "layer's own loops (bias, activation, bias grad)"
    return "other: " + sym


FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)(?:\s+\((.*)\))?\s*$")


def samples(lines):
    cur = None
    for line in lines:
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif not line[0].isspace():
            cur = []
        elif cur is not None:
            m = FRAME.match(line)
            if not m:
                continue
            sym, dso = m.group(1), m.group(2) or ""
            if dso == "inlined":
                dso = ""
            cur.append((sym.split("+")[0], dso))
    if cur:
        yield cur


def main():
    table = collections.Counter()
    skipped = collections.Counter()
    for frames in samples(sys.stdin):
        syms = [s for s, _ in frames]
        if not frames:
            continue
        if {"evaluate", "load_data", "nrt_dataset_load", "_dl_start"} & set(syms):
            skipped["evaluation / loading"] += 1
            continue
        real = [(s, d) for s, d in frames if not s.startswith("_mm") and s not in HELPERS]
        if not real:
            continue
        k = kernel(*real[0])
        if k in ("memset", "memcpy") and len(real) > 1:
            parent = kernel(*real[1])
            if not parent.startswith(("other", "kernel")):
                k = f"{parent} ({k})"
        layer = next((s for s in syms if LAYER.match(s)), None)
        if layer is None:
            if "train" in syms:
                layer = "(step, outside the layers)"
            elif "start_thread" in syms or "clone3" in syms:
                layer = "(other thread)"
            else:
                skipped["outside training"] += 1
                continue
        table[(layer, k)] += 1
    total = sum(table.values())
    if not total:
        print("no samples inside training steps", file=sys.stderr)
        return 1
    by_kernel, by_layer = collections.Counter(), collections.Counter()
    for (layer, k), n in table.items():
        by_kernel[k] += n
        by_layer[layer] += n
    print(f"{total} samples in training steps (left out: {dict(skipped)})\n")
    print("| kernel | share |")
    print("|---|---:|")
    for k, n in by_kernel.most_common():
        if n / total >= 0.005:
            print(f"| {k} | {100 * n / total:.1f} % |")
    print("\n| layer | share | main kernels (% of all) |")
    print("|---|---:|---|")
    for layer, n in by_layer.most_common():
        if n / total < 0.005:
            continue
        ks = sorted(((c, k) for (l, k), c in table.items() if l == layer), reverse=True)[:4]
        desc = ", ".join(f"{k} {100 * c / total:.1f}" for c, k in ks)
        print(f"| {layer} | {100 * n / total:.1f} % | {desc} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
