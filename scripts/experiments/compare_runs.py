#!/usr/bin/env python3
"""Table and validation-loss plot for runs that differ only in one setting (tooling, not runtime).

    python3 scripts/experiments/compare_runs.py OUT_DIR BASELINE [OTHER ...]

Reads OUT_DIR/<name>/metrics.jsonl; writes OUT_DIR/table.md (final validation loss, its change against
the first run, bytes per parameter per step from the last record, mean step time) and, when
matplotlib is there, OUT_DIR/val_loss.png.
"""
import json
import os
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


out, names = sys.argv[1], sys.argv[2:]
runs = {n: load(os.path.join(out, n, "metrics.jsonl")) for n in names}
base = [r["val_loss"] for r in runs[names[0]] if "val_loss" in r][-1]
lines = [
    "| run | final val loss | vs baseline | weights B/param (intra+inter) | grads B/param intra | "
    "grads B/param inter | step ms |",
    "|---|---|---|---|---|---|---|",
]
for n in names:
    recs = runs[n]
    val = [r["val_loss"] for r in recs if "val_loss" in r][-1]
    b = recs[-1].get("comm_bytes_per_param", {})
    w = b.get("weights_intra", 0) + b.get("weights_inter", 0)
    ms = sum(r["step_ms"] for r in recs[1:]) / max(1, len(recs) - 1)
    lines.append(
        f"| {n} | {val:.5f} | {100 * (val / base - 1):+.3f}% | {w:.3f} | {b.get('grads_intra', 0):.3f} | "
        f"{b.get('grads_inter', 0):.3f} | {ms:.0f} |"
    )
table = "\n".join(lines) + "\n"
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table)
print(table)

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, ax = plt.subplots(figsize=(7, 4))
for n in names:
    pts = [(r["step"], r["val_loss"]) for r in runs[n] if "val_loss" in r]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", markersize=3, linewidth=1, label=n)
ax.set_xlabel("step")
ax.set_ylabel("validation loss (nats per byte)")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "val_loss.png"), dpi=120)
print("plot:", os.path.join(out, "val_loss.png"))
