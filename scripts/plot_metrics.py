#!/usr/bin/env python3
"""Plots training and validation loss from a metrics.jsonl (tooling only, not a runtime dependency).

    python3 scripts/plot_metrics.py runs/demo/metrics.jsonl out.png [--baseline NATS --baseline-label TEXT]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("metrics")
parser.add_argument("output")
parser.add_argument("--baseline", type=float, help="a horizontal reference line, in nats")
parser.add_argument("--baseline-label", default="unigram entropy of the data")
args = parser.parse_args()

steps, losses, val_steps, val_losses = [], [], [], []
with open(args.metrics) as f:
    for line in f:
        record = json.loads(line)
        steps.append(record["step"])
        losses.append(record["loss"])
        if "val_loss" in record:
            val_steps.append(record["step"])
            val_losses.append(record["val_loss"])

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(steps, losses, label="train loss", linewidth=1)
if val_steps:
    ax.plot(val_steps, val_losses, "o-", label="validation loss")
if args.baseline is not None:
    ax.axhline(args.baseline, color="gray", linestyle="--", label=args.baseline_label)
ax.set_xlabel("step")
ax.set_ylabel("loss (nats per token)")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(args.output, dpi=120)
