#!/usr/bin/env python3
"""Modern Hopfield retrieval of the shipped digits from Python.

Stores the first N digits (pixels x/8 - 1) as patterns, hides the bottom half
of each (pixels 32..63 = 0: implicit-compare's hopfield-digits problem), and
retrieves them all at once by solving x = X softmax(beta X^T x) with a C++
solver. Prints the solve's summary, how many queries ended nearest their own
digit (and nearest a digit of the same class), and the Python overhead: the
time of solve() in Python over the C++ solver's own wall time.

    PYTHONPATH=build/python python3 examples/python/hopfield_digits.py --patterns 1797
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np

import implicit


def find_digits(path):
    candidates = [path] if path else []
    here = os.path.dirname(os.path.abspath(__file__))
    candidates += [os.path.join(os.environ.get("IMPLICIT_DATA_DIR", ""), "digits.csv.gz"),
                   os.path.join(here, "..", "..", "data", "digits.csv.gz"),
                   "/usr/local/share/implicit/digits.csv.gz", "/usr/share/implicit/digits.csv.gz"]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return candidate
    sys.exit("hopfield_digits.py: digits.csv.gz not found; pass --data PATH")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, default=1797, help="digits stored (1..1797)")
    parser.add_argument("--beta", type=float, default=2.0, help="inverse temperature")
    parser.add_argument("--solver", default="anderson", choices=implicit.solver_names())
    parser.add_argument("--tolerance", type=float, default=1e-8)
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=5, help="solves timed (the fastest kept)")
    parser.add_argument("--data", help="path of digits.csv.gz")
    args = parser.parse_args()

    with gzip.open(find_digits(args.data), "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    if not 1 <= args.patterns <= len(table):
        sys.exit(f"hopfield_digits.py: --patterns must be in 1..{len(table)}")
    table = table[:args.patterns]
    labels = table[:, 64].astype(int)
    patterns = np.asfortranarray(table[:, :64].T / 8.0 - 1.0, dtype=args.dtype)   # 64 x N
    queries = patterns.copy(order="F")
    queries[32:, :] = 0.0

    energy = implicit.ModernHopfieldEnergy(patterns, beta=args.beta, learn_beta=False)
    cccp = implicit.CccpMap(energy)
    solver = implicit.Solver(args.solver, absolute_tolerance=args.tolerance, max_iterations=500)
    best_python, best_cpp = float("inf"), float("inf")
    for _ in range(max(1, args.repeat)):
        z = queries.copy(order="F")
        start = time.perf_counter()
        summary = solver.solve(cccp, z)
        best_python = min(best_python, time.perf_counter() - start)
        best_cpp = min(best_cpp, summary.wall_time_seconds)

    print(summary.brief_report())
    # Nearest stored pattern of each retrieved state.
    distances = (np.sum(z**2, axis=0)[None, :] - 2 * patterns.T @ z +
                 np.sum(patterns**2, axis=0)[:, None])
    nearest = np.argmin(distances, axis=0)
    print(f"retrieved own digit: {np.mean(nearest == np.arange(args.patterns)):.4f}, "
          f"same class: {np.mean(labels[nearest] == labels):.4f} "
          f"({args.patterns} queries, beta {args.beta:g}, {args.dtype})")
    print(f"solve() from Python {best_python * 1e3:.2f} ms, C++ solver {best_cpp * 1e3:.2f} ms "
          f"(fastest of {args.repeat}): Python overhead "
          f"{100 * (best_python / best_cpp - 1):.1f} %")
    return 0 if summary.is_converged() else 1


if __name__ == "__main__":
    sys.exit(main())
