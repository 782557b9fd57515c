#!/usr/bin/env python3
"""A schedule model of the cluster Picard loop on hopfield-digits (not a measurement).

The cluster kernel (lib/cuda/fused_picard.cu, DeviceLoop::kClustersWhenPossible)
was written without a GPU at hand. This script estimates its solve time from:
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

  /usr/bin/python3 scripts/cluster-model.py [--clusters 16] [--slots 64] [--b-cost 4.5] [--a-scale 1]
"""
import argparse
import gzip
import heapq
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


def solve_time(evals, clusters, slots, b_cost, a_scale):
    queue = iter(int(e) for e in evals)
    held = [[e for _, e in zip(range(slots), queue)] for _ in range(clusters)]
    events = [(0.0, k) for k in range(clusters)]
    end = 0.0
    while events:
        t, k = heapq.heappop(events)
        if not held[k]:
            end = max(end, t)
            continue
        step = b_cost + phase_a(len(held[k]), a_scale=a_scale)
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
    o = ap.parse_args()
    evals = evaluations(o.data)
    print(f"evaluations: total {evals.sum()}, max {evals.max()}, mean {evals.mean():.1f}, "
          f"99th percentile {np.percentile(evals, 99):.0f}")
    ms = solve_time(evals, o.clusters, o.slots, o.b_cost, o.a_scale) / 1000
    print(f"model: {o.clusters} clusters x {o.slots} slots, phase B {o.b_cost} us, "
          f"phase A x{o.a_scale}: {ms:.2f} ms")


if __name__ == "__main__":
    main()
