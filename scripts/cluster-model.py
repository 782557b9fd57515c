#!/usr/bin/env python3
"""A schedule model of the cluster Picard loop on hopfield-digits (not a measurement).

The cluster kernel (solvers/src/cuda/fused_picard.cu, DeviceLoop::kFusedWhenPossible)
was written without a GPU at hand (its first GPU run, on an H200, is in
docs/gpu.md; --probe replays the costs measured there). This script estimates
its solve time from:
  * each sample's Picard evaluations on hopfield-digits (N = B = 1797, beta 2,
    absolute tolerance 1e-8), computed here with numpy exactly as the problem
    defines it (patterns x/8 - 1, queries with pixels 32..63 zeroed);
  * a cost per cluster iteration taken from the grid kernel's phase timings
    measured on an H100 (README, "GPU"): phase A, a warp taking k samples over
    225 patterns, (7.3 + 8 k) us (from 10.7 us per call of four samples over 62
    patterns); with q sub-chunks per sample, 1/q of that; phase B and the
    barriers B_COST us.
It replays the kernel's schedule: CLUSTERS clusters of SLOTS samples, the next
batch column taken from the queue whenever a sample stops.

With --probe FILE (the JSON of `implicit-bench --device cuda --json FILE`) the
cost of a cluster iteration is instead the measured one: the hopfield-digits
phase probe's mean (phase A + barrier) + (phase B + barrier) + active list for
the range of active samples it falls in (tensor-core phase A, or with
--cuda-cores the CUDA-core one), so other shapes can be tried on measured costs.

  /usr/bin/python3 scripts/cluster-model.py [--clusters 16] [--slots 64] [--b-cost 4.5] [--a-scale 1]
  /usr/bin/python3 scripts/cluster-model.py --probe device-bench.json [--cuda-cores] [--clusters 16] [--slots 64]
"""
import argparse
import gzip
import heapq
import json
import math
import os

import numpy as np


def evaluations(data, beta=2.0, tol=1e-8, max_iterations=1000):
    digits = np.loadtxt(gzip.open(data), delimiter=",")
    x = (digits[:, :64] / 8 - 1).T  # n x N patterns
    z = x.copy()
    z[32:, :] = 0
    count = np.zeros(z.shape[1], dtype=int)
    active = np.ones(z.shape[1], dtype=bool)
    for t in range(max_iterations + 1):
        s = beta * (x.T @ z)
        p = np.exp(s - s.max(axis=0))
        f = x @ (p / p.sum(axis=0))
        done = active & (np.linalg.norm(f - z, axis=0) <= tol)
        count[done] = t + 1
        active &= ~done
        if not active.any():
            break
        z[:, active] = f[:, active]
    return count


def phase_a(count, warps=16, a_scale=1.0):
    q = 1
    while count * q * 2 <= warps:
        q *= 2
    per_warp = math.ceil(count / warps) if q == 1 else 1
    return a_scale * (7.3 + 8.0 * per_warp) / q


def probe_costs(path, tensor_cores, problem="hopfield-digits"):
    """The measured cost (us) of a cluster iteration by its active samples."""
    try:
        with open(path) as f:
            probes = json.load(f).get("cluster_phase_probes") or []
    except (OSError, ValueError) as e:
        raise SystemExit(f"--probe {path}: {e}")
    for p in probes:
        if p and p.get("problem") == problem and p.get("tensor_cores") == tensor_cores and "by_active_samples" in p:
            ranges = []
            for r in p["by_active_samples"]:
                lo, hi = (int(x) for x in r["active"].split()[0].split("-"))
                parts = [r.get("phase_a_us"), r.get("phase_b_us"), r.get("active_list_us")]
                ranges.append((lo, hi, None if parts[0] is None or parts[1] is None else sum(v or 0 for v in parts)))
            return ranges
    raise SystemExit(f"{path}: no {problem} phase probe with tensor_cores={tensor_cores}")


def solve_time(evals, clusters, slots, b_cost, a_scale, measured=None):
    queue = iter(int(e) for e in evals)
    held = [[e for _, e in zip(range(slots), queue)] for _ in range(clusters)]
    events = [(0.0, k) for k in range(clusters)]
    end = 0.0
    while events:
        t, k = heapq.heappop(events)
        if not held[k]:
            end = max(end, t)
            continue
        count = len(held[k])
        if measured is None:
            step = b_cost + phase_a(count, a_scale=a_scale)
        else:
            known = [(lo, hi, c) for lo, hi, c in measured if c is not None]
            inside = [c for lo, hi, c in known if lo <= count <= hi]
            # (a range the probe never saw: the nearest one measured)
            step = inside[0] if inside else min(known, key=lambda r: min(abs(count - r[0]), abs(count - r[1])))[2]
        going = [e - 1 for e in held[k] if e > 1]
        going += [e for _, e in zip(range(len(held[k]) - len(going)), queue)]
        held[k] = going
        heapq.heappush(events, (t + step, k))
    return end


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(here, "..", "data", "digits.csv.gz"))
    ap.add_argument("--clusters", type=int, default=16)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--b-cost", type=float, default=4.5)
    ap.add_argument("--a-scale", type=float, default=1.0)
    ap.add_argument("--probe", help="costs from this implicit-bench --device cuda JSON (its phase probe)")
    ap.add_argument("--cuda-cores", action="store_true", help="with --probe: the CUDA-core phase A's probe")
    o = ap.parse_args()
    measured = probe_costs(o.probe, not o.cuda_cores) if o.probe else None
    evals = evaluations(o.data)
    print(f"evaluations: total {evals.sum()}, max {evals.max()}, mean {evals.mean():.1f}, "
          f"99th percentile {np.percentile(evals, 99):.0f}")
    ms = solve_time(evals, o.clusters, o.slots, o.b_cost, o.a_scale, measured) / 1000
    if measured is None:
        print(f"model: {o.clusters} clusters x {o.slots} slots, phase B {o.b_cost} us, "
              f"phase A x{o.a_scale}: {ms:.2f} ms")
    else:
        costs = ", ".join(f"{lo}-{hi}: {c:.2f} us" if c is not None else f"{lo}-{hi}: -" for lo, hi, c in measured)
        print(f"model on measured costs per iteration ({costs}): {o.clusters} clusters x {o.slots} slots: {ms:.2f} ms")


if __name__ == "__main__":
    main()
