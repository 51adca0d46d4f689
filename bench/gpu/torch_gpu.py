#!/usr/bin/python3
"""The PyTorch side of the netc GPU benchmark.

Trains one of the six seed models on one device (cuda, or cpu for a check)
in one of four ways -- "variants" -- and prints one JSON object with its step
time.  The models, their optimizers, batch sizes and the data loaders are
those of bench/torch_models.py (imported, not copied), so the network, its
initialisation (the same seed) and its hyperparameters are the CPU
benchmark's; --batch overrides the batch size alone.

Method.  The whole training set (the first --n-train samples) is moved to the
device once, before anything is timed ("data resident").  Each epoch draws
its order with torch.randperm(n, device=device, generator=...) on the device,
and each step gathers its batch by index on the device (x[idx], y[idx]).
Every variant runs fixed-size batches: the last partial batch of an epoch is
dropped, so steps_per_epoch = n // batch and all variants train on the same
sequence of batches (the graph variant needs fixed shapes).  Steps run on
over epoch boundaries without a break; the per-epoch randperm lies inside the
timed region, as netc also shuffles on the device once per epoch.

Variants (one training step = gather, zero_grad(set_to_none=True), forward,
loss, backward, optimizer step):

  eager       the ordinary loop, step by step.
  compile     the step function step(xb, yb) (zero_grad, forward, loss,
              backward, optimizer step) wrapped in torch.compile (default
              mode).  Should compiling the whole step fail in this torch
              version, the model alone is compiled (torch.compile(net)) and
              loss, backward and step stay eager, on a freshly built model;
              the JSON's "compiled" says which: "step" or "model".
  compile-ro  the same with mode="reduce-overhead" (CUDA graphs by inductor).
  graph       the whole step captured by hand in one torch.cuda.CUDAGraph as
              in PyTorch's "whole network capture": static input tensors,
              three warm-up iterations on a side stream, the optimizer built
              with capturable=True where it has that option (Adam; SGD needs
              nothing), zero_grad(set_to_none=True) before the capture,
              forward + loss + backward + opt.step() captured; each step then
              copies its gathered batch into the static inputs
              (static_x.copy_(x[idx])) and replays the graph.  The gather and
              copy are part of the timed step, as in the other variants.  The
              side-stream iterations train on the first three batches and
              count as warm-up steps, so this variant too trains on the same
              batches as the others.  cuda only.

Timing.  The loss is not read during the run (that would synchronize): it is
summed on the device (running = running + loss.detach()) and read once at
the end.  --warmup steps run first (default 20; counted in steps, not
seconds: for the compile variants the first call compiles, which can take a
long time), then --steps timed steps (default 200) in blocks of 20.  On cuda
each block is timed with a pair of torch.cuda.Event(enable_timing=True) and
ends with a synchronize (the GPU is idle when a block begins, so the time
includes any launch overhead); on cpu with time.perf_counter.  "step_ms" is
the median over the blocks of (block time / steps in the block), "step_ms_min"
the least of them, "final_loss" the mean loss of the timed steps.

Precision and cuDNN: TF32 is switched off (torch.backends.cuda.matmul and
cudnn allow_tf32 = False, float32 matmul precision "highest"), so the
comparison is exact fp32 like the netc side; torch.backends.cudnn.benchmark is
on, so PyTorch gets its fastest cuDNN algorithms.  --precision bf16 runs the
forward pass and the loss under torch.autocast(dtype=torch.bfloat16), fp32
master weights and optimizer, as netc's `precision bf16` does (bf16 needs no
loss scaling).

Errors (unknown model, unreadable data, cuda asked for but not available, the
graph variant on cpu, torch.compile missing) print one line on stderr and
exit with status 1 (data) or 2 (usage, environment).

usage: torch_gpu.py MODEL --data PATH [--n-train N] [--batch B]
                    [--variant eager|compile|compile-ro|graph]
                    [--device cuda|cpu] [--steps S] [--warmup W] [--seed S]
                    [--precision fp32|bf16]
"""
import argparse
import contextlib
import functools
import importlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch_models import MODELS, load  # noqa: E402

PROG = "torch_gpu.py"
BLOCK = 20          # timed steps per block
GRAPH_WARMUP = 3    # side-stream iterations before the capture


class Fail(Exception):
    """A clean failure: message for stderr, exit status."""

    def __init__(self, msg, status):
        super().__init__(msg)
        self.status = status


class Parser(argparse.ArgumentParser):
    def error(self, message):          # one line, no usage block
        raise Fail(message, 2)


def first_line(e):
    s = str(e).strip().splitlines()
    s = s[0] if s else ""
    return f"{type(e).__name__}: {s if len(s) <= 120 else s[:117] + '...'}"


def build(a, device, capturable=False):
    """Model, loss, optimizer as in torch_models.py, on the device.

    The optimizer is rebuilt after the move with the same hyperparameters
    (its .defaults); capturable=True is added where the optimizer has it."""
    torch.manual_seed(a.seed)
    net, loss_fn, opt, batch = MODELS[a.model]()
    net.to(device).train()
    kw = dict(opt.defaults)
    if capturable and "capturable" in kw:
        kw["capturable"] = True
    opt = type(opt)(net.parameters(), **kw)
    return net, loss_fn, opt, batch


class Batches:
    """Fixed-size batches over epochs, shuffled on the device per epoch."""

    def __init__(self, x, y, batch, seed, device):
        self.x, self.y, self.batch = x, y, batch
        self.n = len(x)
        self.per_epoch = self.n // batch
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device = device
        self.pos = self.per_epoch          # draw a permutation on first use

    def next_idx(self):
        if self.pos == self.per_epoch:
            self.perm = torch.randperm(self.n, device=self.device, generator=self.gen)
            self.pos = 0
        s = self.pos * self.batch
        self.pos += 1
        return self.perm[s:s + self.batch]

    def next(self):
        idx = self.next_idx()
        return self.x[idx], self.y[idx]


def check_data(a, net, x, y):
    """A file of the wrong kind fails here, not inside a CUDA kernel."""
    want = {"boston_linear": (13,), "boston_mlp": (13,), "digits_mlp": (64,),
            "digits_cnn": (1, 8, 8), "digits_resnet": (1, 8, 8)}.get(a.model, (3, 32, 32))
    bad = None
    if len(x) == 0:
        bad = "no samples"
    elif tuple(x.shape[1:]) != want:
        bad = f"samples of shape {tuple(x.shape[1:])}, not {want}"
    elif y.dtype == torch.long:
        # the last linear layer's outputs (a Sequential or a ResNet alike)
        classes = [mod for mod in net.modules() if isinstance(mod, torch.nn.Linear)][-1].out_features
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= classes:
            bad = f"labels {lo}..{hi}, not within 0..{classes - 1}"
    elif tuple(y.shape[1:]) != (1,):
        bad = f"targets of shape {tuple(y.shape[1:])}, not (1,)"
    if bad:
        raise Fail(f"--data {a.data}: {bad} for {a.model}", 1)


def dynamo_counts():
    """Graphs dynamo compiled and graph breaks it took, where it says."""
    try:
        from torch._dynamo.utils import counters
        return {"dynamo_graphs": int(counters["stats"]["unique_graphs"]),
                "graph_breaks": int(sum(counters["graph_break"].values()))}
    except Exception:  # noqa: BLE001 -- informative only
        return {}


def make_step(net, loss_fn, opt, cast):
    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with cast():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        return loss
    return step


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None):
    ap = Parser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--data", required=True)
    ap.add_argument("--n-train", type=int, default=0,
                    help="train on the first N samples (netc's training-set size)")
    ap.add_argument("--batch", type=int, default=0,
                    help="batch size (default: the model's)")
    ap.add_argument("--variant", default="eager",
                    choices=["eager", "compile", "compile-ro", "graph"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: the forward pass and loss under autocast(bfloat16)")
    a = ap.parse_args(argv)

    if a.model not in MODELS:
        raise Fail(f"unknown model '{a.model}' (one of: {', '.join(sorted(MODELS))})", 2)
    if a.steps < 1 or a.warmup < 0 or a.batch < 0 or a.n_train < 0:
        raise Fail("--steps must be >= 1; --warmup, --batch, --n-train >= 0", 2)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise Fail("--device cuda: CUDA is not available to this torch "
                   f"({torch.__version__}); use --device cpu", 2)
    if a.variant == "graph" and a.device != "cuda":
        raise Fail("--variant graph captures a CUDA graph: it needs --device cuda", 2)
    if a.variant == "graph" and a.warmup < GRAPH_WARMUP:
        raise Fail(f"--variant graph needs --warmup >= {GRAPH_WARMUP} "
                   "(its side-stream warm-up iterations)", 2)
    compiling = a.variant in ("compile", "compile-ro")
    if compiling and not hasattr(torch, "compile"):
        raise Fail(f"--variant {a.variant}: torch.compile needs PyTorch 2.0 or "
                   f"newer (this is {torch.__version__})", 2)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = True
    device = torch.device(a.device)
    # the forward pass and the loss in the run's precision (the backward pass
    # follows autocast's casts)
    cast = contextlib.nullcontext if a.precision == "fp32" else \
        functools.partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16)

    try:
        x, y = load(a.model, a.data)
    except (OSError, ValueError, RuntimeError, IndexError) as e:
        raise Fail(f"--data {a.data}: cannot load it for {a.model}: {first_line(e)}", 1)
    if a.n_train:
        if a.n_train > len(x):
            raise Fail(f"--n-train {a.n_train}: {a.data} has only {len(x)} samples", 1)
        x, y = x[:a.n_train], y[:a.n_train]

    net, loss_fn, opt, batch = build(a, device, capturable=a.variant == "graph")
    check_data(a, net, x, y)
    if a.batch:
        batch = a.batch
    n = len(x)
    if n < batch:
        raise Fail(f"{n} training samples < batch {batch}: not one full batch "
                   "(the last partial batch is dropped)", 1)
    x, y = x.contiguous().to(device), y.contiguous().to(device)
    sync(device)

    info = {}
    running = torch.zeros((), device=device)

    def new_batches():
        return Batches(x, y, batch, a.seed, device)

    batches = new_batches()

    if a.variant == "graph":
        static_x = torch.empty((batch,) + tuple(x.shape[1:]), dtype=x.dtype, device=device)
        static_y = torch.empty((batch,) + tuple(y.shape[1:]), dtype=y.dtype, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                idx = batches.next_idx()
                static_x.copy_(x[idx])
                static_y.copy_(y[idx])
                opt.zero_grad(set_to_none=True)
                with cast():
                    loss = loss_fn(net(static_x), static_y)
                loss.backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            with cast():
                static_loss = loss_fn(net(static_x), static_y)
            static_loss.backward()
            opt.step()
        sync(device)

        def one_step():
            idx = batches.next_idx()
            static_x.copy_(x[idx])
            static_y.copy_(y[idx])
            graph.replay()
            return static_loss
        warm_left = a.warmup - GRAPH_WARMUP
    else:
        step = make_step(net, loss_fn, opt, cast)
        mark = None
        if compiling:
            mode = "reduce-overhead" if a.variant == "compile-ro" else "default"
            if mode == "reduce-overhead":
                mark = getattr(getattr(torch, "compiler", None),
                               "cudagraph_mark_step_begin", None)
            step = torch.compile(step, mode=mode)
            info["compiled"] = "step"
            # The first call compiles; should compiling the whole step fail,
            # start again from a fresh model with the model alone compiled.
            t0 = time.perf_counter()
            try:
                if mark:
                    mark()
                xb, yb = batches.next()
                running = running + step(xb, yb).detach()
                sync(device)
            except Exception as e:  # noqa: BLE001 -- any compiler failure
                print(f"{PROG}: compiling the whole step failed ({first_line(e)}); "
                      "compiling the model alone", file=sys.stderr)
                importlib.import_module("torch._dynamo").reset()
                net, loss_fn, opt, _ = build(a, device)
                step = make_step(torch.compile(net, mode=mode), loss_fn, opt, cast)
                info["compiled"] = "model"
                batches = new_batches()
                running = torch.zeros((), device=device)
                t0 = time.perf_counter()
                if mark:
                    mark()
                xb, yb = batches.next()
                running = running + step(xb, yb).detach()
                sync(device)
            info["first_call_s"] = round(time.perf_counter() - t0, 3)
            warm_left = a.warmup - 1 if a.warmup else 0
        else:
            warm_left = a.warmup

        def one_step():
            if mark:
                mark()
            xb, yb = batches.next()
            return step(xb, yb)

    # Compile variants with --warmup 0 have made their (compiling) first
    # call already: it is not timed, and counts as a warm-up step.
    for _ in range(warm_left):
        running = running + one_step().detach()
    sync(device)
    if compiling:
        info.update(dynamo_counts())

    per_step = []
    running = torch.zeros((), device=device)
    done = 0
    while done < a.steps:
        k = min(BLOCK, a.steps - done)
        if device.type == "cuda":
            t_begin = torch.cuda.Event(enable_timing=True)
            t_end = torch.cuda.Event(enable_timing=True)
            t_begin.record()
            for _ in range(k):
                running = running + one_step().detach()
            t_end.record()
            t_end.synchronize()
            ms = t_begin.elapsed_time(t_end)
        else:
            t0 = time.perf_counter()
            for _ in range(k):
                running = running + one_step().detach()
            ms = 1e3 * (time.perf_counter() - t0)
        per_step.append(ms / k)
        done += k
    final_loss = running.item() / a.steps

    out = {
        "model": a.model,
        "variant": a.variant,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "batch": batch,
        "n_train": n,
        "steps_per_epoch": n // batch,
        "params": sum(p.numel() for p in net.parameters()),
        "steps": a.steps,
        "warmup": a.warmup,
        "step_ms": statistics.median(per_step),
        "step_ms_min": min(per_step),
        "blocks": len(per_step),
        "final_loss": final_loss,
        "tf32": False,
        "precision": a.precision,
    }
    if device.type == "cpu":
        out["threads"] = torch.get_num_threads()
    out.update(info)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(e.status)
    except KeyboardInterrupt:
        sys.exit(130)
