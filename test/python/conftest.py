"""Shared problems for the Python tests: small Hopfield retrieval batches."""
import numpy as np
import pytest

import implicit


def hopfield_problem(dtype=np.float64, n=16, patterns=12, batch=6, beta=4.0, seed=0,
                     noise=0.3):
    """An energy over random unit-norm-ish patterns and queries near them."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, patterns)) / np.sqrt(n) * 2.0
    energy = implicit.ModernHopfieldEnergy(np.asfortranarray(X, dtype=dtype), beta=beta)
    z0 = X[:, :batch] + noise * rng.standard_normal((n, batch)) / np.sqrt(n)
    return energy, np.asfortranarray(z0, dtype=dtype)


@pytest.fixture(params=[np.float64, np.float32], ids=["float64", "float32"])
def dtype(request):
    return request.param


def tolerance(dtype):
    """The solver tolerance each precision can reach."""
    return 1e-10 if dtype == np.float64 else 1e-4
