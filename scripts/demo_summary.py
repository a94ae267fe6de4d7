#!/usr/bin/env python3
"""Summarises a training run's metrics.jsonl for a person: throughput, losses, memory per rank and
the bytes each kind of collective moved. Standard library only.

    python3 scripts/demo_summary.py runs/demo/metrics.jsonl
"""
import json
import statistics
import sys


def mb(b):
    return f"{b / 1e6:,.1f} MB"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    try:
        rows = [json.loads(line) for line in open(path) if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"demo_summary: cannot read {path}: {e}")
    if not rows:
        sys.exit(f"demo_summary: {path} has no steps")
    last = rows[-1]
    timed = rows[1:] if len(rows) > 1 else rows  # step 1 includes warm-up (primitive creation)
    tps = statistics.median(r["tokens_per_s"] for r in timed)
    train_s = sum(r["step_ms"] for r in rows) / 1e3

    print(f"steps {last['step']}, {last['tokens']:,} tokens in {train_s / 60:.1f} min of steps; "
          f"median {tps:,.0f} tokens/s, MFU {statistics.median(r['mfu'] for r in timed):.0%}")
    vals = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    print(f"loss: step 1 {rows[0]['loss']:.3f} -> step {last['step']} {last['loss']:.3f}"
          + ("; validation " + ", ".join(f"{v:.3f} @{s}" for s, v in vals) if vals else ""))

    m = last["memory"]
    print("memory per rank (accounted): " + ", ".join(
        f"{k} {mb(m[k])}" for k in ("params", "grads", "optimizer", "activations", "comm_buffers"))
        + f"; total {mb(m['total'])}; peak RSS, largest rank: {mb(last['peak_rss_bytes_max'])}")

    comm = last["comm"]
    tokens_per_step = last["tokens"] / last["step"]
    print(f"communication per step and rank: {mb(comm['total_bytes'])} "
          f"({comm['total_bytes'] / tokens_per_step / 1e3:,.1f} KB per token), "
          f"{comm['seconds'] * 1e3:,.0f} ms in collective calls (waits for the other ranks included)")
    for kind, k in sorted(comm["by_kind"].items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"  {kind:<15} {k['calls']:>4} calls  {mb(k['bytes']):>10}  "
              f"({k['intra_node_bytes'] / max(k['bytes'], 1):.0%} intra-node)")
    run_bytes = sum(r["comm"]["total_bytes"] for r in rows)
    print(f"  whole run: {run_bytes / 1e9:.2f} GB per rank")


if __name__ == "__main__":
    main()
