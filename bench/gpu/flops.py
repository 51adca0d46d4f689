#!/usr/bin/python3
"""Floating-point operations of one training step of a seed model.

Counts the multiply-adds of the matrix products and convolutions (2 FLOPs
each), the work that bounds a step from below; activations, pooling, the loss
and the optimizer are left out (they are memory-bound and, for the models
here, under 1 % of the FLOPs).  Forward: 2 * in * out per sample and linear
layer, 2 * C * KH * KW * O * OH * OW per sample and convolution.  Backward:
the weight gradient costs as much again, and so does the input gradient --
except for the first layer, whose input needs none (netc and PyTorch both
skip it).  So a step is about three forward passes.

The models are bench/torch_models.py's; shapes come from one forward pass on
the CPU.  Prints JSON: model, batch, forward, backward and step FLOPs.

usage: flops.py MODEL [--batch B]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_models import MODELS  # noqa: E402

INPUTS = {"boston_linear": (13,), "boston_mlp": (13,), "digits_mlp": (64,),
          "digits_cnn": (1, 8, 8), "cifar10": (3, 32, 32), "cnn101": (3, 32, 32)}


def count(model, batch):
    net, _, _, default_batch = MODELS[model]()
    batch = batch or default_batch
    layers = []   # FLOPs of each product's forward pass, per sample, in order

    def hook(m, inp, out):
        if isinstance(m, nn.Linear):
            layers.append(2 * m.in_features * m.out_features)
        elif isinstance(m, nn.Conv2d):
            oh, ow = out.shape[-2:]
            c = m.in_channels // m.groups
            layers.append(2 * c * m.kernel_size[0] * m.kernel_size[1] * m.out_channels * oh * ow)

    for m in net.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        net(torch.zeros((1,) + INPUTS[model]))
    fwd = sum(layers) * batch
    bwd = (2 * sum(layers) - layers[0]) * batch   # dw everywhere, dx but for the first
    return {"model": model, "batch": batch, "forward_flops": fwd, "backward_flops": bwd,
            "step_flops": fwd + bwd}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=0, help="default: the model's")
    a = ap.parse_args(argv)
    print(json.dumps(count(a.model, a.batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
