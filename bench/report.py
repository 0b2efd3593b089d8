#!/usr/bin/env python3
"""Turns criterion's estimates (target/criterion/<group>/<bench>/new/estimates.json) into
Markdown tables: median ns/op per benchmark and its ratio to the group's floor and peers.

Usage: bench/report.py [CRITERION_DIR]   (default: $CARGO_TARGET_DIR or target, + /criterion)
Every number printed comes from the same `cargo bench` run."""
import json
import os
import sys
from pathlib import Path


def load(root: Path):
    groups = {}
    for est in sorted(root.glob("**/new/estimates.json")):
        bench_dir = est.parent.parent
        meta = json.loads((bench_dir / "new" / "benchmark.json").read_text())
        group = meta.get("group_id") or bench_dir.relative_to(root).parts[0]
        name = meta.get("function_id") or bench_dir.name
        if meta.get("value_str"):
            name = f"{name}/{meta['value_str']}"
        median = json.loads(est.read_text())["median"]["point_estimate"]
        groups.setdefault(group, {})[name] = median
    return groups


def main():
    default = Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "criterion"
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    groups = load(root)
    if not groups:
        sys.exit(f"no criterion results under {root}")
    for group, rows in groups.items():
        floors = {k: v for k, v in rows.items() if k.startswith("floor")}
        print(f"\n### {group}\n")
        print("| benchmark | median ns/op | × floor |")
        print("|---|---:|---:|")
        for name, ns in rows.items():
            floor_name = "floor_atomic_pair_2threads" if "2threads" in name else None
            floor = floors.get(floor_name) if floor_name else None
            if floor is None and floors:
                floor = next((v for k, v in floors.items() if "2threads" not in k), None)
            ratio = f"{ns / floor:.2f}" if floor else "—"
            print(f"| {name} | {ns:.1f} | {ratio} |")
    if "scaling" in groups:
        scaling_table(groups["scaling"])


def scaling_table(rows):
    """The `scaling` bench as one table: a row per workload, a column per thread count
    (ns per op per thread), and the gate's ratio to the limiter alone at each count."""
    table = {}
    for name, ns in rows.items():
        work, _, threads = name.rpartition("/")
        if threads.endswith("t") and threads[:-1].isdigit():
            table.setdefault(work, {})[int(threads[:-1])] = ns
    counts = sorted({t for cols in table.values() for t in cols})
    print("\n### scaling (ns per op per thread; only thread counts up to the cores ran)\n")
    print("| workload | " + " | ".join(f"{t} thr" for t in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for work, cols in table.items():
        cells = " | ".join(f"{cols[t]:.1f}" if t in cols else "—" for t in counts)
        print(f"| {work} | {cells} |")
    gate, lim = table.get("gate_admit_release", {}), table.get("limiter_acquire_release", {})
    ratios = " | ".join(
        f"{gate[t] / lim[t]:.2f}" if t in gate and t in lim and lim[t] else "—" for t in counts
    )
    print(f"| gate ÷ limiter | {ratios} |")


if __name__ == "__main__":
    main()
