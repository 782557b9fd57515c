"""The examples in examples/python, end to end at small sizes."""
import os
import re
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "python")


def run(script, *arguments):
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *arguments],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_hopfield_digits_example_retrieves_every_query():
    out = run("hopfield_digits.py", "--patterns", "150", "--repeat", "1")
    assert "150/150 samples converged" in out
    same_class = float(re.search(r"same class: ([0-9.]+)", out).group(1))
    assert same_class > 0.8
    assert re.search(r"Python overhead -?[0-9.]+ %", out)


def test_hopfield_digits_example_rejects_bad_arguments():
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, "hopfield_digits.py"),
                             "--patterns", "0"], capture_output=True, text=True)
    assert result.returncode != 0 and "--patterns must be in 1..1797" in result.stderr


def test_train_deq_digits_example_learns():
    pytest.importorskip("torch", reason="python3-torch is not installed")
    out = run("train_deq_digits.py", "--train", "300", "--epochs", "3")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert len(rows) == 3
    losses = [float(row[1]) for row in rows]
    accuracy = float(rows[-1][2])
    assert losses[-1] < losses[0] and accuracy > 0.5


def test_train_deq_digits_example_stops_a_diverging_training():
    """The divergence rule of every trainer: one line, exit status 3."""
    pytest.importorskip("torch", reason="python3-torch is not installed")
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, "train_deq_digits.py"),
                             "--train", "200", "--epochs", "2", "--lr", "1e308"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "training diverged at epoch" in lines[0] and "lower --lr" in lines[0]
