#!/usr/bin/env python3
"""PyTorch twin of examples/train_cifar10.cpp: the same recipe, for accuracy and
time next to minidl (bench/RESULTS.md, "Accuracy next to PyTorch").

Same as train_cifar10 (defaults are its defaults; `make train` passes
--width 0.5 --epochs 25 --batch-size 128 --lr 0.05 --warmup-epochs 1 --schedule cosine):
  model    SmallNet: conv3x3(no bias)-BN-ReLU, 3 x [conv3x3(no bias)-maxpool2-BN-ReLU],
           global max-pool, linear; base widths 64-128-256-512 times --width,
           rounded half away from zero (std::llround), at least 1; PyTorch's
           default init; the parameter count is printed and checked against
           minidl's (--expect-params, or the CIFAR/width-1 count).
  data     CIFAR-10 binary records (1 label byte + 3072 CHW pixel bytes) read
           directly: train data_batch_1..4, test data_batch_5 when the folder
           has no test_batch.bin (the shared subset), else 1..5 / test_batch;
           Fashion-MNIST gzipped IDX files.
  augment  zero-pad (4 for CIFAR, 2 for Fashion-MNIST) + random crop, random
           horizontal flip (p 0.5); then /255 and per-channel normalization
           (CIFAR mean 0.4914 0.4822 0.4465, std 0.2470 0.2435 0.2616;
           Fashion-MNIST 0.2860 / 0.3530). Test: normalization only.
  optim    SGD momentum 0.9, dampening 0, no Nesterov, weight decay 5e-4 on
           every parameter; cross-entropy (mean).
  schedule per iteration: SequentialLR(LinearLR(0.1 -> 1 over warmup steps),
           CosineAnnealingLR(T_max = total - warmup steps)), as minidl's
           LinearWarmup(CosineAnnealingLR) (start factor 0.1).
  batches  shuffled every epoch, last partial batch kept (drop_last false);
           test batch max(batch_size, 256).
  eval     after every epoch: test accuracy in eval mode, and in train mode
           (batch statistics) with the BN buffers saved and restored.

Differences that are not the recipe: the random streams (init, shuffling,
augmentation) are PyTorch's, not minidl's; augmentation runs vectorized on the
training thread (minidl uses --workers loader threads). Epoch seconds count the
training loop only, as train_cifar10's; wall_seconds is the whole run.

  python3 bench/train_torch.py --data /work/shared/data/cifar10-subset --width 0.5 --epochs 25 \
      --batch-size 128 --lr 0.05 --warmup-epochs 1 --schedule cosine
  python3 bench/train_torch.py --dataset fashion-mnist --width 0.25 --epochs 2 --warmup-epochs 1 ...
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
FMNIST_MEAN, FMNIST_STD = (0.2860,), (0.3530,)


def scaled_width(base, width):
    # std::llround: half away from zero (Python's round() is half to even).
    return max(1, int(math.floor(base * width + 0.5)))


def small_net(width=1.0, in_channels=3, num_classes=10):
    """minidl's models::SmallNet (models/small_net.cpp) with BatchNorm."""
    layers = []
    cin = in_channels
    for i, base in enumerate((64, 128, 256, 512)):
        cout = scaled_width(base, width)
        layers.append(nn.Conv2d(cin, cout, 3, 1, 1, bias=False))
        if i > 0:
            layers.append(nn.MaxPool2d(2))
        layers += [nn.BatchNorm2d(cout), nn.ReLU()]
        cin = cout
    layers += [nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def read_cifar(files):
    raw = b"".join(open(f, "rb").read() for f in files)
    assert len(raw) % 3073 == 0, "CIFAR-10 files must hold whole 3073-byte records"
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3073)
    labels = torch.from_numpy(rec[:, 0].astype(np.int64))
    images = torch.from_numpy(rec[:, 1:].copy()).reshape(-1, 3, 32, 32)
    return images, labels


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    assert got == magic, f"{path}: magic {got}, expected {magic}"
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(args):
    if args.dataset == "fashion-mnist":
        d = args.data or "/usr/share/datasets/fashion-mnist"
        def part(prefix):
            x = read_idx(f"{d}/{prefix}-images-idx3-ubyte.gz", 2051)
            y = read_idx(f"{d}/{prefix}-labels-idx1-ubyte.gz", 2049)
            return torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64))
        return part("train"), part("t10k"), FMNIST_MEAN, FMNIST_STD, 2, f"Fashion-MNIST from {d}"
    d = args.data
    if os.path.exists(f"{d}/test_batch.bin"):
        train_files = [f"{d}/data_batch_{i}.bin" for i in range(1, 6)]
        test_files = [f"{d}/test_batch.bin"]
    else:  # the shared subset: hold out batch 5
        train_files = [f"{d}/data_batch_{i}.bin" for i in range(1, 5)]
        test_files = [f"{d}/data_batch_5.bin"]
    names = lambda fs: ",".join(os.path.basename(f) for f in fs)
    return (read_cifar(train_files), read_cifar(test_files), CIFAR_MEAN, CIFAR_STD, 4,
            f"CIFAR-10 from {d} (train {names(train_files)}, test {names(test_files)})")


class Augment:
    """Zero-pad + random crop + horizontal flip on a uint8 batch, then /255 and normalize."""

    def __init__(self, mean, std, padding, augment, gen):
        self.mean = torch.tensor(mean).view(1, -1, 1, 1)
        self.std = torch.tensor(std).view(1, -1, 1, 1)
        self.padding, self.augment, self.gen = padding, augment, gen

    def normalize(self, x):
        return (x.float() / 255.0 - self.mean) / self.std

    def __call__(self, x):
        if self.augment:
            n, c, h, w = x.shape
            p = self.padding
            padded = F.pad(x, (p, p, p, p))  # zeros, in uint8 pixel space as minidl's RandomCrop
            top = torch.randint(0, 2 * p + 1, (n,), generator=self.gen)
            left = torch.randint(0, 2 * p + 1, (n,), generator=self.gen)
            rows = (top[:, None] + torch.arange(h))[:, None, :, None]
            cols = (left[:, None] + torch.arange(w))[:, None, None, :]
            x = padded[torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]
            flip = torch.rand(n, generator=self.gen) < 0.5
            x = torch.where(flip[:, None, None, None], x.flip(3), x)
        return self.normalize(x)


def evaluate(model, images, labels, batch, norm, device):
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(labels), batch):
            x, y = norm(images[s:s + batch]).to(device), labels[s:s + batch].to(device)
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y).item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
    return loss_sum / len(labels), correct / len(labels)


def evaluate_train_mode(model, images, labels, batch, norm, device):
    saved = {k: v.clone() for k, v in model.named_buffers()}
    model.train()
    acc = evaluate(model, images, labels, batch, norm, device)[1]
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(saved[k])
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="")
    ap.add_argument("--dataset", default="cifar10", choices=["cifar10", "fashion-mnist"])
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--schedule", default="cosine", choices=["cosine", "none"])
    ap.add_argument("--warmup-epochs", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: all cores, as minidl)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]; augmentation stays on the CPU, as minidl's loader")
    ap.add_argument("--no-augment", action="store_true")
    ap.add_argument("--expect-params", type=int, default=0, help="minidl's parameter count for this model")
    args = ap.parse_args()
    if args.dataset == "cifar10" and not args.data:
        args.data = "/work/shared/data/cifar10-subset"

    wall0 = time.perf_counter()
    torch.set_num_threads(args.threads or os.cpu_count())
    torch.manual_seed(args.seed)
    (xtr, ytr), (xte, yte), mean, std, padding, desc = load(args)
    gen = torch.Generator().manual_seed(args.seed + 1)
    aug = Augment(mean, std, padding, not args.no_augment, gen)

    device = torch.device(args.device)
    model = small_net(args.width, in_channels=xtr.shape[1]).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if args.expect_params:
        assert n_params == args.expect_params, f"{n_params} parameters, minidl has {args.expect_params}"
    elif args.width == 1.0 and xtr.shape[1] == 3:
        assert n_params == 1557066, f"{n_params} parameters, minidl's SmallNet has 1557066"

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    bs = args.batch_size
    steps_per_epoch = (len(ytr) + bs - 1) // bs
    warmup, total = args.warmup_epochs * steps_per_epoch, args.epochs * steps_per_epoch
    if args.schedule == "cosine":
        after = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, total - warmup))
    else:
        after = torch.optim.lr_scheduler.StepLR(opt, 2**31 - 1, 1.0)
    if warmup > 0:
        first = torch.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [first, after], milestones=[warmup])
    else:
        sched = after
    test_batch = max(bs, 256)

    print(f"data:  {desc}: {len(ytr)} train, {len(yte)} test images")
    print(f"model: smallnet (batchnorm, width {args.width}), {n_params} parameters")
    print(f"optim: sgd lr {args.lr} momentum {args.momentum} weight decay {args.weight_decay}, "
          f"schedule {args.schedule} (warmup {args.warmup_epochs} epochs)")
    print(f"run:   {args.epochs} epochs of {steps_per_epoch} batches of {bs}, {torch.get_num_threads()} threads, "
          f"seed {args.seed}, torch {torch.__version__}, device {device}", flush=True)

    train_seconds = 0.0
    for epoch in range(args.epochs):
        model.train()
        lr = opt.param_groups[0]["lr"]
        perm = torch.randperm(len(ytr), generator=gen)
        t0 = time.perf_counter()
        loss_sum, correct = 0.0, 0
        for s in range(0, len(ytr), bs):
            idx = perm[s:s + bs]
            x, y = aug(xtr[idx]).to(device, non_blocking=True), ytr[idx].to(device, non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            l = loss.item()
            assert math.isfinite(l), f"the loss is {l} at epoch {epoch + 1}"
            loss_sum += l * len(y)
            correct += (logits.argmax(1) == y).sum().item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        model.eval()
        test_loss, test_acc = evaluate(model, xte, yte, test_batch, aug.normalize, device)
        test_acc_tm = evaluate_train_mode(model, xte, yte, test_batch, aug.normalize, device)
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {loss_sum / len(ytr):.4f} acc "
              f"{100 * correct / len(ytr):.2f}% | test loss {test_loss:.4f} acc {100 * test_acc:.2f}% "
              f"(train mode {100 * test_acc_tm:.2f}%) | lr {lr:.4g} | {seconds:.1f} s, "
              f"{len(ytr) / seconds:.1f} images/s", flush=True)

    print(json.dumps({"impl": "pytorch", "dataset": args.dataset, "width": args.width, "epochs": args.epochs,
                      "seed": args.seed, "device": str(device), "test_acc": test_acc, "test_acc_train_mode": test_acc_tm,
                      "seconds": round(train_seconds, 2),
                      "wall_seconds": round(time.perf_counter() - wall0, 2),
                      "images_per_s": round(args.epochs * len(ytr) / train_seconds, 2)}))


if __name__ == "__main__":
    main()
