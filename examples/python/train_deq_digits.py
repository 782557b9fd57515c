#!/usr/bin/env python3
"""Trains a deep-equilibrium classifier on the shipped digits from PyTorch.

The hidden state is the equilibrium z* = tanh(W z* + U x + b) of each image x
(64 pixels / 16), found by a C++ solver through implicit.torch.DEQ; a linear
head maps z* to the 10 classes. Gradients of W, U and b come from the implicit
function theorem (a C++ linear solve with torch's vector-Jacobian products),
never from unrolling. W is rescaled to spectral norm <= 0.9 so that the map is
a contraction and every equilibrium exists. Prints per epoch the training loss,
held-out accuracy, time, and the solvers' mean iterations.

A training that diverges (a non-finite loss, gradient or parameter, or an
equilibrium the solver cannot find: implicit.torch.ConvergenceError) stops at
that batch, keeps
the parameters of its best epoch, says "training diverged at epoch k: ...;
lower --lr" on one line and exits with status 3, as libimplicit's programs do
(docs/programs.md).

    PYTHONPATH=build/python python3 examples/python/train_deq_digits.py --epochs 10
"""
import argparse
import copy
import gzip
import math
import os
import sys
import time

import numpy as np
import torch

import implicit.torch as itorch


def find_digits(path):
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in ([path] if path else []) + [
            os.path.join(os.environ.get("IMPLICIT_DATA_DIR", ""), "digits.csv.gz"),
            os.path.join(here, "..", "..", "data", "digits.csv.gz"),
            "/usr/local/share/implicit/digits.csv.gz"]:
        if candidate and os.path.isfile(candidate):
            return candidate
    sys.exit("train_deq_digits.py: digits.csv.gz not found; pass --data PATH")


class Cell(torch.nn.Module):
    """f(z, x) = tanh(W z + U x + b) with |W|_2 <= 0.9."""

    def __init__(self, hidden, inputs):
        super().__init__()
        self.W = torch.nn.Parameter(0.1 * torch.randn(hidden, hidden, dtype=torch.float64))
        self.U = torch.nn.Linear(inputs, hidden, dtype=torch.float64)

    def forward(self, z, x):
        W = self.W * torch.clamp(0.9 / torch.linalg.matrix_norm(self.W, 2), max=1.0)
        return torch.tanh(z @ W.T + self.U(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--train", type=int, default=1500, help="training images (rest held out)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--solver", default="anderson")
    parser.add_argument("--linear-solver", default="gmres")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="path of digits.csv.gz")
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    with gzip.open(find_digits(args.data), "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    if not 1 <= args.train < len(table):
        sys.exit(f"train_deq_digits.py: --train must be in 1..{len(table) - 1}")
    images = torch.from_numpy(table[:, :64] / 16.0)
    labels = torch.from_numpy(table[:, 64].astype(np.int64))
    x_train, y_train = images[:args.train], labels[:args.train]
    x_test, y_test = images[args.train:], labels[args.train:]

    deq = itorch.DEQ(Cell(args.hidden, 64), args.hidden, solver=args.solver,
                     solver_options={"absolute_tolerance": 1e-8, "max_iterations": 200},
                     backward_options={"linear_solver": args.linear_solver, "tolerance": 1e-8})
    head = torch.nn.Linear(args.hidden, 10, dtype=torch.float64)
    optimizer = torch.optim.Adam(list(deq.parameters()) + list(head.parameters()), lr=args.lr)

    print(f"{'epoch':>5} {'loss':>8} {'held-out acc':>12} {'time s':>7} "
          f"{'fwd iters':>9} {'bwd iters':>9}")
    parameters = list(deq.parameters()) + list(head.parameters())
    initial = (copy.deepcopy(deq.state_dict()), copy.deepcopy(head.state_dict()))
    best = None  # (held-out accuracy, epoch, the modules' states)
    diverged = None  # (epoch, cause)
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(args.train)
        total, forward_iters, backward_iters, batches = 0.0, 0, 0, 0
        for first in range(0, args.train, args.batch):
            index = order[first:first + args.batch]
            optimizer.zero_grad()
            try:
                loss = torch.nn.functional.cross_entropy(head(deq(x_train[index])), y_train[index])
                if not math.isfinite(loss.item()):
                    diverged = (epoch, f"loss {loss.item()}")
                    break
                loss.backward()
            except itorch.ConvergenceError as error:
                diverged = (epoch, f"the equilibrium was not found ({error})")
                break
            if not all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in parameters):
                diverged = (epoch, "gradient not finite")
                break
            optimizer.step()
            if not all(bool(torch.isfinite(p).all()) for p in parameters):
                diverged = (epoch, "parameters not finite after the step")
                break
            total += loss.item() * len(index)
            forward_iters += deq.last_forward_summary.iterations
            backward_iters += deq.last_backward_summary.iterations
            batches += 1
        if diverged:
            break
        with torch.no_grad():
            accuracy = (head(deq(x_test)).argmax(dim=1) == y_test).double().mean().item()
        if best is None or accuracy > best[0]:
            best = (accuracy, epoch, copy.deepcopy(deq.state_dict()), copy.deepcopy(head.state_dict()))
        print(f"{epoch:>5} {total / args.train:>8.4f} {accuracy:>12.4f} "
              f"{time.perf_counter() - start:>7.2f} {forward_iters / batches:>9.1f} "
              f"{backward_iters / batches:>9.1f}")
    if diverged:
        states, kept = initial, "the initial parameters kept"
        if best is not None:
            states, kept = best[2:], f"epoch {best[1]} kept (held-out accuracy {best[0]:.4f})"
        deq.load_state_dict(states[0])
        head.load_state_dict(states[1])
        print(f"train_deq_digits.py: training diverged at epoch {diverged[0]}: {diverged[1]}; "
              f"lower --lr; {kept}", file=sys.stderr)
        return 3
    return 0 if best is not None and best[0] > 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
