#!/usr/bin/env python3
"""Where a generated program's training time goes, from a perf profile.

Reads `perf script -F comm,tid,ip,sym --inline` output (of a
`perf record --call-graph dwarf` run of a netc-generated program) on stdin
and prints, for the samples taken inside training steps (the stack holds
`train` and not `evaluate`), a table: layer function (conv2d_2_bwd, ...)
by kernel (the leaf: OpenBLAS sgemm, im2col, col2im, maxpool, memset, ...).
Samples of other threads (OpenBLAS or OpenMP workers) are counted by their
leaf alone.  Standard library only.

usage: perf script -i FILE -F comm,tid,ip,sym --inline | perf_breakdown.py
"""
import collections
import re
import sys

LAYER = re.compile(r"^(conv2d|linear|maxpool2d|avgpool2d|relu|dropout|flatten)_\d+_(fwd|bwd)$")


def kernel(sym, dso_hint):
    if sym.startswith(("sgemm_", "cblas_sgemm", "gemm_", "ukernel", "pack_")) or dso_hint:
        if "copy" in sym:
            return "sgemm (packing)"
        return "sgemm (compute)"
    for k in ("nrt_im2col", "nrt_col2im", "nrt_maxpool2d_fwd", "nrt_maxpool2d_bwd",
              "nrt_avgpool2d", "nrt_xent", "nrt_mse", "nrt_optim_step", "nrt_dataset_gather",
              "nrt_rng"):
        if sym.startswith(k):
            return k
    if "memset" in sym:
        return "memset"
    if "memmove" in sym or "memcpy" in sym:
        return "memcpy"
    if "sched_yield" in sym or "gomp" in sym.lower() or sym.startswith(("do_spin", "futex")):
        return "thread wait/spin"
    return "other: " + sym


def samples(lines):
    cur = None
    for line in lines:
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        if not line[0].isspace():
            cur = {"head": line.split(), "frames": []}
            continue
        if cur is None:
            continue
        parts = line.split(None, 1)
        sym = parts[1].strip() if len(parts) > 1 else "?"
        sym = sym.replace(" (inlined)", "")
        cur["frames"].append(sym)
    if cur:
        yield cur


def main():
    table = collections.Counter()
    total = 0
    skipped = collections.Counter()
    for s in samples(sys.stdin):
        fr = s["frames"]
        if not fr:
            continue
        syms = [f.split("+")[0] for f in fr]
        in_train = "train" in syms
        if "evaluate" in syms or "load_data" in syms or "nrt_dataset_load" in syms:
            skipped["evaluate/load"] += 1
            continue
        leaf = syms[0]
        # the innermost frame that is not a libc / helper frame decides
        # memset/memcpy: attribute them to the kernel that called them
        k = kernel(leaf, "[unknown]" == leaf and False)
        if k in ("memset", "memcpy") and len(syms) > 1:
            parent = kernel(syms[1], False)
            if not parent.startswith("other"):
                k = parent + " / " + k
        if k.startswith("other: [k]") or leaf.startswith(("do_syscall", "entry_")):
            pass
        layer = next((x for x in syms if LAYER.match(x)), None)
        if layer is None:
            if not in_train:
                layer = "(other thread)" if "start_thread" in syms else "(outside training)"
            else:
                layer = "(step, no layer)"
        if layer == "(outside training)":
            skipped["outside training"] += 1
            continue
        table[(layer, k)] += 1
        total += 1
    if not total:
        print("no samples inside training steps", file=sys.stderr)
        return 1
    by_kernel = collections.Counter()
    by_layer = collections.Counter()
    for (layer, k), n in table.items():
        by_kernel[k] += n
        by_layer[layer] += n
    print(f"{total} samples in training steps (left out: {dict(skipped)})\n")
    print("| kernel | share |")
    print("|---|---:|")
    for k, n in by_kernel.most_common():
        if n / total >= 0.005:
            print(f"| {k} | {100 * n / total:.1f} % |")
    print("\n| layer | share | top kernels |")
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
