#!/usr/bin/env python3
"""The PyTorch side of bench/images.sh: models/cnn101.net as a PyTorch user
writes it -- a Dataset over the image list, torchvision's transforms, a
DataLoader with worker processes, nn.Sequential, SGD -- trained for the
given epochs, then the test set evaluated.  Prints one JSON line:
{"load_s", "train_s", "test_s", "total_s", "test_accuracy"}, where total_s
runs from the first line of this script (imports included) to the end.

    images.py --root data/digit_images --epochs E --workers W --threads T
"""
import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402
from torchvision import transforms as T  # noqa: E402


class ImageList(torch.utils.data.Dataset):
    """desc_*.csv: a path,label header, then one row an image."""

    def __init__(self, csv, transform):
        root = os.path.dirname(csv)
        with open(csv) as f:
            rows = [ln.strip().split(",") for ln in f.readlines()[1:] if ln.strip()]
        self.items = [(os.path.join(root, p), int(lb)) for p, lb in rows]
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transform(Image.open(path).convert("RGB")), label


def model():
    m = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(2304, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                      nn.Linear(128, 101))
    for layer in m:  # the model file's init statements
        if isinstance(layer, nn.Conv2d):
            nn.init.xavier_normal_(layer.weight)
        elif isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, 0, 0.01)
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.zeros_(layer.bias)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    norm = T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    train_tf = T.Compose([T.Resize((32, 32)), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    eval_tf = T.Compose([T.Resize((32, 32)), T.ToTensor(), norm])
    t = time.perf_counter()
    train = torch.utils.data.DataLoader(
        ImageList(os.path.join(a.root, "desc_train.csv"), train_tf), batch_size=32,
        shuffle=True, num_workers=a.workers, persistent_workers=a.workers > 0)
    test = torch.utils.data.DataLoader(
        ImageList(os.path.join(a.root, "desc_test.csv"), eval_tf), batch_size=32,
        num_workers=a.workers)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9, dampening=0.1)
    lf = nn.CrossEntropyLoss()
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    net.train()
    for _ in range(a.epochs):
        for x, y in train:
            opt.zero_grad()
            loss = lf(net(x), y)
            loss.backward()
            opt.step()
            loss.item()
    train_s = time.perf_counter() - t
    t = time.perf_counter()
    net.eval()
    right = n = 0
    with torch.no_grad():
        for x, y in test:
            right += int((net(x).argmax(1) == y).sum())
            n += len(y)
    test_s = time.perf_counter() - t
    print(json.dumps({"load_s": load_s, "train_s": train_s, "test_s": test_s,
                      "total_s": time.perf_counter() - T0, "test_accuracy": right / n}))


if __name__ == "__main__":
    main()
