#!/usr/bin/env python3
"""The learning-rate scaling study of examples/README.md ("train_cifar10 --scale-lr").

Runs make train's recipe at 1, 2 and 4 ranks (minidl-launch, per-rank batch
fixed, so the total batch grows with the ranks) with each --scale-lr rule, then
writes summary.md (final accuracy, loss, steps) and scale_lr.svg (test accuracy
and train loss per epoch, one line per run) into --out.

At 1 rank the total batch equals the reference batch, so the three rules are
the same run; it is trained once. Accuracy does not depend on the machine's
load (the runs are deterministic per build), only the times do.

  python3 scripts/scale_lr_study.py --build build --out runs/scale_lr
  python3 scripts/scale_lr_study.py --out runs/scale_lr --plot-only   # redraw
  python3 scripts/scale_lr_study.py --ranks 4 --rules linear,sqrt --warmup-epochs 5 --out runs/scale_lr_warmup5
"""
import argparse
import csv
import os
import subprocess
import sys
import time

RECIPE = ["--model", "smallnet", "--width", "0.5", "--epochs", "25", "--batch-size", "128",
          "--lr", "0.05", "--schedule", "cosine"]  # + --warmup-epochs (make train: 1)
RULES = ["none", "linear", "sqrt"]
COLORS = {"none": "#1f77b4", "linear": "#d62728", "sqrt": "#2ca02c"}
DASHES = {1: "", 2: "6,3", 4: "2,2"}


def runs(ranks_list, rules):
    for ranks in ranks_list:
        for rule in (["none"] if ranks == 1 else rules):
            yield ranks, rule


def train(args, ranks, rule, log_dir):
    threads = max(1, (os.cpu_count() or 1) // ranks)
    cmd = [os.path.join(args.build, "examples", "train_cifar10"), "--data", args.data, *RECIPE,
           "--warmup-epochs", str(args.warmup_epochs), "--scale-lr", rule, "--threads", str(threads), "--workers", "1", "--seed", str(args.seed),
           "--log-dir", log_dir]
    if ranks > 1:
        cmd = [os.path.join(args.build, "bin", "minidl-launch"), "--nproc-per-node", str(ranks)] + cmd
    os.makedirs(log_dir, exist_ok=True)
    start = time.time()
    with open(os.path.join(log_dir, "stdout.txt"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"scale_lr_study: {' '.join(cmd)} exited {rc}; see {log_dir}/stdout.txt")
    return time.time() - start


def read_metrics(log_dir):
    with open(os.path.join(log_dir, "metrics.csv")) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def polyline(points, x0, y0, w, h, xmax, ymin, ymax, color, dash):
    xy = " ".join(f"{x0 + w * x / xmax:.1f},{y0 + h * (1 - (y - ymin) / (ymax - ymin)):.1f}" for x, y in points)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.6"{dash_attr} points="{xy}"/>'


def panel(series, key, title, x0, ymin, ymax, epochs):
    y0, w, h = 40, 380, 260
    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
           f'<text x="{x0 + w / 2}" y="{y0 - 12}" text-anchor="middle" font-size="14">{title}</text>']
    for i in range(5):
        y = ymin + (ymax - ymin) * i / 4
        py = y0 + h * (1 - i / 4)
        out.append(f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end" font-size="11">{y:.2f}</text>')
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eee"/>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 28}" text-anchor="middle" font-size="12">epoch</text>')
    for e in range(0, epochs + 1, 5):
        out.append(f'<text x="{x0 + w * e / epochs:.1f}" y="{y0 + h + 14}" text-anchor="middle" '
                   f'font-size="11">{e}</text>')
    for (ranks, rule), rows in series.items():
        pts = [(r["epoch"], min(max(r[key], ymin), ymax)) for r in rows]
        out.append(polyline(pts, x0, y0, w, h, epochs, ymin, ymax, COLORS[rule], DASHES[ranks]))
    return out


def plot(series, path, epochs):
    accs = [r["test_acc"] for rows in series.values() for r in rows]
    losses = [r["train_loss"] for rows in series.values() for r in rows]
    rows = (len(series) + 3) // 4  # legend: 4 entries a row
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="900" height="{360 + 22 * rows}" '
           'font-family="sans-serif">']
    svg += panel(series, "test_acc", "test accuracy", 60, 0.0, max(accs) * 1.05, epochs)
    svg += panel(series, "train_loss", "train loss", 500, 0.0, max(losses) * 1.05, epochs)
    for i, (ranks, rule) in enumerate(series):
        x, y = 60 + 200 * (i % 4), 360 + 22 * (i // 4)
        label = f"{ranks} rank{'s' if ranks > 1 else ''}, {rule if ranks > 1 else 'reference'}"
        svg.append(f'<line x1="{x}" x2="{x + 24}" y1="{y}" y2="{y}" stroke="{COLORS[rule]}" stroke-width="2"'
                   + (f' stroke-dasharray="{DASHES[ranks]}"' if DASHES[ranks] else "") + "/>")
        svg.append(f'<text x="{x + 28}" y="{y + 4}" font-size="11">{label}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--data", default="../shared/data/cifar10-subset")
    p.add_argument("--out", default="runs/scale_lr")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--rules", default=",".join(RULES))
    p.add_argument("--warmup-epochs", type=int, default=1, help="make train's 1; Goyal et al. warm up for 5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot-only", action="store_true", help="redraw from the runs already in --out")
    args = p.parse_args()
    ranks_list = [int(r) for r in args.ranks.split(",")]

    series, seconds = {}, {}
    for ranks, rule in runs(ranks_list, args.rules.split(",")):
        log_dir = os.path.join(args.out, f"ranks{ranks}_{rule}")
        done = os.path.exists(os.path.join(log_dir, "metrics.csv")) and len(read_metrics(log_dir)) == 25
        if not args.plot_only and not done:  # a finished run is kept
            print(f"training: {ranks} rank(s), --scale-lr {rule} -> {log_dir}", flush=True)
            seconds[(ranks, rule)] = train(args, ranks, rule, log_dir)
        series[(ranks, rule)] = read_metrics(log_dir)

    epochs = int(max(r["epoch"] for rows in series.values() for r in rows))
    plot(series, os.path.join(args.out, "scale_lr.svg"), epochs)
    lines = ["| ranks | total batch | rule | peak lr | final test acc | best test acc | final train loss |",
             "|---|---|---|---|---|---|---|"]
    for (ranks, rule), rows in series.items():
        peak_lr = max(r["lr"] for r in rows)
        lines.append(f"| {ranks} | {128 * ranks} | {rule if ranks > 1 else '(reference)'} | {peak_lr:.4g} | "
                     f"{100 * rows[-1]['test_acc']:.2f}% | {100 * max(r['test_acc'] for r in rows):.2f}% | "
                     f"{rows[-1]['train_loss']:.3f} |")
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}/summary.md and {args.out}/scale_lr.svg")


if __name__ == "__main__":
    main()
