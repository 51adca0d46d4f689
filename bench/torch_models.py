#!/usr/bin/python3
"""The PyTorch side of the netc benchmark (bench/run.sh).

Trains one of the seed models on the CPU with an ordinary PyTorch loop and
prints one JSON object with its step times.  The architectures are written out
by hand below and mirror models/*.net layer for layer (layers, activations,
initialisation where the model file sets one, loss, optimizer and its
hyperparameters, batch size); run.sh checks that the parameter count agrees
with the one the netc-generated program reports.

Timing mirrors what the generated program writes to --metrics: the clock
covers the whole training loop of an epoch -- the random permutation of the
training set, then the steps (gather the batch by index from tensors
already in memory, zero_grad, forward, loss, backward, step, loss.item())
-- and stops before anything else (no evaluation here).  The reported figure is the median, over the
epochs after the warm-up epochs, of (epoch seconds / steps in the epoch).
The median of the individually timed steps is reported as well.

--compile (PyTorch 2.x) runs the same step -- zero_grad, forward, loss,
backward, optimizer step -- as one function wrapped in torch.compile
(inductor: C++ kernels built with the host's compiler), the gather and
loss.item() staying eager around it.  The compiling happens in the first
calls, so in the warm-up epochs: a model whose batch size does not divide
the training set compiles twice there (the full batch, then the last
partial one), and later epochs reuse both.  The JSON says how long the
warm-up epochs took ("warmup_s", the compiling included) and how many
graphs dynamo compiled during the timed epochs ("timed_compiles", which
should be 0: anything else means compile time leaked into the figure).

usage: torch_models.py MODEL --threads K --data PATH --n-train N
                       [--epochs E] [--warmup W] [--seed S]
                       [--compile [--compile-mode MODE]]
"""
import argparse
import json
import re
import statistics
import sys
import time

import torch
from torch import nn


# ---------------------------------------------------------------- models

def boston_linear():
    # linear(1); loss mse; adam(lr=1e-3); batch 8
    net = nn.Sequential(nn.Linear(13, 1))
    return net, nn.MSELoss(), torch.optim.Adam(net.parameters(), lr=1e-3), 8


def boston_mlp():
    # linear(16) relu linear(32) relu linear(1); mse; adam(lr=0.01); batch 32
    net = nn.Sequential(nn.Linear(13, 16), nn.ReLU(),
                        nn.Linear(16, 32), nn.ReLU(),
                        nn.Linear(32, 1))
    return net, nn.MSELoss(), torch.optim.Adam(net.parameters(), lr=0.01), 32


def digits_mlp():
    # linear(128) relu dropout(0.1) linear(10); cross_entropy;
    # sgd(lr=0.1, momentum=0.9); batch 32
    net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1),
                        nn.Linear(128, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    return net, nn.CrossEntropyLoss(), opt, 32


def digits_cnn():
    # input [1, 8, 8]; conv2d(16, k3, p1) relu maxpool2d(2)
    # conv2d(32, k3, p1) relu maxpool2d(2) flatten linear(64) relu linear(10);
    # cross_entropy; adam(lr=1e-3); batch 32
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(),
                        nn.Linear(64, 10))
    return net, nn.CrossEntropyLoss(), torch.optim.Adam(net.parameters(), lr=1e-3), 32


def cifar10():
    # input [3, 32, 32]; conv2d(32, k5, p2) maxpool2d(2) conv2d(32, k5, p2)
    # maxpool2d(2) conv2d(64, k5, p2) maxpool2d(2) flatten linear(64)
    # linear(10) -- no activations in the model file; cross_entropy;
    # sgd(lr=0.01); batch 64
    net = nn.Sequential(nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(2),
                        nn.Conv2d(32, 32, 5, padding=2), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 5, padding=2), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 4 * 4, 64), nn.Linear(64, 10))
    return net, nn.CrossEntropyLoss(), torch.optim.SGD(net.parameters(), lr=0.01), 64


def cnn101():
    # input [3, 32, 32]; conv2d(32, k3) relu maxpool2d(2) conv2d(64, k3) relu
    # maxpool2d(2) flatten linear(256) relu linear(128) relu linear(101);
    # init conv2d weight=xavier_normal, linear weight=normal(0, 0.01),
    # bias=zeros; cross_entropy; sgd(lr=1e-2, momentum=0.9, dampening=0.1);
    # batch 32
    net = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 6 * 6, 256), nn.ReLU(),
                        nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 101))
    for m in net:
        if isinstance(m, nn.Conv2d):
            nn.init.xavier_normal_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9, dampening=0.1)
    return net, nn.CrossEntropyLoss(), opt, 32


def digits_cnn_bn():
    # digits_cnn with conv2d(bias=false) batchnorm2d and linear(64)
    # batchnorm1d; cross_entropy; adam(lr=1e-3); batch 32
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                        nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(32 * 2 * 2, 64), nn.BatchNorm1d(64), nn.ReLU(),
                        nn.Linear(64, 10))
    return net, nn.CrossEntropyLoss(), torch.optim.Adam(net.parameters(), lr=1e-3), 32


class LastState(nn.RNN):
    """nn.RNN(batch_first=True) giving its top layer's last state, as
    netc's rnn does."""

    def __init__(self, *args, **kw):
        super().__init__(*args, batch_first=True, **kw)

    def forward(self, x):
        # nn.RNN.forward by name: torch.compile (dynamo, torch 2.15) fails
        # on super().forward(x) here ("DelayGraphBreakVariable() has no
        # type"; the rnn itself is a graph break), not on this.
        return nn.RNN.forward(self, x)[0][:, -1]


def airline_rnn():
    # input [12, 1]; rnn(16) linear(1); mse; adam(lr=0.003); batch 16
    net = nn.Sequential(LastState(1, 16), nn.Linear(16, 1))
    return net, nn.MSELoss(), torch.optim.Adam(net.parameters(), lr=0.003), 16


class BasicBlock(nn.Module):
    """A ResNet basic block: two 3x3 convolutions with batchnorm, the input
    added back; at stride 2 the input through a strided 1x1 convolution and
    batchnorm (option B): models/resnet20.net's blocks basic and down."""

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Identity() if stride == 1 else nn.Sequential(
            nn.Conv2d(cin, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.shortcut(x) + self.bn2(self.conv2(out)))


class ResNet(nn.Module):
    def __init__(self, stem, stages, head):
        super().__init__()
        self.stem, self.stages, self.head = stem, stages, head

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def resnet20():
    # conv2d(16, k3, p1, no bias) batchnorm2d relu; 3 stages of 3 basic
    # blocks (16, 32, 64 channels; the first of stages 2 and 3 at stride 2
    # with a projected shortcut); avgpool2d(8) flatten linear(10);
    # cross_entropy; sgd(lr=0.1, momentum=0.9, weight_decay=5e-4) (the
    # cosine schedule steps once an epoch, outside the timed loop); batch 128
    def stage(cin, planes, stride):
        return [BasicBlock(cin, planes, stride), BasicBlock(planes, planes),
                BasicBlock(planes, planes)]
    net = ResNet(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                               nn.ReLU()),
                 nn.Sequential(*stage(16, 16, 1), *stage(16, 32, 2), *stage(32, 64, 2)),
                 nn.Sequential(nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return net, nn.CrossEntropyLoss(), opt, 128


def digits_resnet():
    # conv2d(16, k3, p1, no bias) batchnorm2d relu; two basic blocks of 16
    # channels; maxpool2d(2) flatten linear(10); cross_entropy;
    # adam(lr=1e-3); batch 32
    net = ResNet(nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                               nn.ReLU()),
                 nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 16)),
                 nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 10)))
    return net, nn.CrossEntropyLoss(), torch.optim.Adam(net.parameters(), lr=1e-3), 32


MODELS = {f.__name__: f for f in
          (boston_linear, boston_mlp, digits_mlp, digits_cnn, cifar10, cnn101, digits_cnn_bn,
           airline_rnn, digits_resnet, resnet20)}


# ------------------------------------------------------------------ data

def load_boston(path):
    rows = [[float(v) for v in line.split()] for line in open(path) if line.strip()]
    t = torch.tensor(rows, dtype=torch.float32)
    x, y = t[:, :13], t[:, 13:14]
    x = (x - x.mean(0)) / x.std(0, unbiased=False)  # standardize=true: population std
    return x, y


def load_digits(path, image):
    rows = [[int(v) for v in line.split(",")] for line in open(path) if line.strip()]
    t = torch.tensor(rows)
    x = t[:, :64].float() * 0.0625           # scale=0.0625
    if image:
        x = x.reshape(-1, 1, 8, 8)
    return x, t[:, 64].long()


def load_cifar(path):
    raw = open(path, "rb").read()
    rec = 1 + 3 * 32 * 32
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(-1, rec)
    return (t[:, 1:].float() / 255.0).reshape(-1, 3, 32, 32), t[:, 0].long()


def load_airline(path):
    # a header, then 12 month-on-month changes and the next one a row
    rows = [[float(v) for v in line.split(",")] for line in open(path).readlines()[1:]
            if line.strip()]
    t = torch.tensor(rows, dtype=torch.float32)
    return t[:, :12].reshape(-1, 12, 1).contiguous(), t[:, 12:13].contiguous()


def load(model, path):
    if model.startswith("boston"):
        return load_boston(path)
    if model.startswith("digits"):
        return load_digits(path, model in ("digits_cnn", "digits_cnn_bn", "digits_resnet"))
    if model.startswith("airline"):
        return load_airline(path)
    return load_cifar(path)


# ----------------------------------------------------------------- train

def cpu_capability():
    """The vector instruction set torch's own kernels dispatch to (AVX2,
    AVX512, ...), as torch reports it; torch 1.13 has no function for it."""
    m = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    return m.group(1) if m else "?"


def compiled_graphs():
    """Graphs dynamo has compiled so far in this process."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--n-train", type=int, default=0,
                    help="train on the first N samples (netc's training-set size)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1, help="epochs left out of the median")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", action="store_true",
                    help="run the step through torch.compile (PyTorch 2.x)")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile's mode (default, max-autotune, ...)")
    a = ap.parse_args(argv)
    if a.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile needs PyTorch 2.x; this is {torch.__version__}")
    if a.compile and a.warmup < 1:
        ap.error("--compile needs --warmup >= 1: the first epoch compiles")
    if a.epochs <= a.warmup:
        ap.error("--epochs must be more than --warmup: no epoch would be timed")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    net, loss_fn, opt, batch = MODELS[a.model]()
    x, y = load(a.model, a.data)
    if a.n_train:
        if a.n_train > len(x):
            ap.error(f"--n-train {a.n_train}: {a.data} has only {len(x)} samples")
        x, y = x[:a.n_train].contiguous(), y[:a.n_train].contiguous()
    n = len(x)
    net.train()
    gen = torch.Generator().manual_seed(a.seed)

    def step(xb, yb):
        opt.zero_grad()
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        return loss

    if a.compile:
        # dynamic=False: the two batch shapes an epoch has get a graph each,
        # its loops specialised to the sizes, rather than one graph generic
        # in the batch size (dynamo's default once it sees a second shape).
        # Both are compiled in the first epoch, a warm-up epoch.
        step = torch.compile(step, mode=a.compile_mode, dynamic=False)

    per_epoch, steps_all = [], []
    warmup_s = 0.0
    for epoch in range(a.epochs):
        if epoch == a.warmup and a.compile:
            graphs_warm = compiled_graphs()
        t0 = time.perf_counter()  # the whole loop: the shuffle too
        perm = torch.randperm(n, generator=gen)
        times = []
        running = 0.0
        for s in range(0, n, batch):
            ts = time.perf_counter()
            idx = perm[s:s + batch]
            loss = step(x[idx], y[idx])
            running += loss.item()
            times.append(time.perf_counter() - ts)
        secs = time.perf_counter() - t0
        # The warm-up epochs, where torch.compile compiles, are not timed.
        if epoch >= a.warmup:
            per_epoch.append(secs / len(times))
            steps_all.extend(times)
        else:
            warmup_s += secs

    info = {}
    if a.compile:
        info = {"compile_mode": a.compile_mode, "graphs": compiled_graphs(),
                "timed_compiles": compiled_graphs() - graphs_warm}
    print(json.dumps({
        "model": a.model,
        "framework": "torch",
        "torch_version": torch.__version__,
        "mode": "compile" if a.compile else "eager",
        "cpu_capability": cpu_capability(),
        "threads": torch.get_num_threads(),
        "batch": batch,
        "n_train": n,
        "steps_per_epoch": (n + batch - 1) // batch,
        "epochs_measured": len(per_epoch),
        "params": sum(p.numel() for p in net.parameters()),
        "step_ms": 1e3 * statistics.median(per_epoch),
        "step_ms_per_step_median": 1e3 * statistics.median(steps_all),
        "warmup_s": warmup_s,
        "final_loss": running / len(times),
        **info,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
