"""libimplicit from Python: equilibrium solvers, energy-based attention layers
and implicit-function-theorem gradients, running in C++.

    import numpy as np
    import implicit

    patterns = np.asfortranarray(np.random.default_rng(0).standard_normal((64, 100)))
    energy = implicit.ModernHopfieldEnergy(patterns, beta=2.0)
    queries = np.asfortranarray(patterns[:, :10] + 0.1)     # 64 x 10, one query per column
    summary = implicit.solve(implicit.CccpMap(energy), queries, "anderson", memory=5)
    print(summary.brief_report())      # queries now hold the retrieved states

Arrays are dimension x batch (one sample per column), Fortran-ordered, of the
object's dtype (float64 or float32); they are used in place, never copied
silently (see docs/python.md for what is copied and when).
"""

from ._implicit import (  # noqa: F401
    BackwardResult,
    CccpMap,
    ConvergenceError,
    DenseAssociativeMemoryEnergy,
    Energy,
    EnergyRootMap,
    EnergyTransformer,
    EnergyTransformerMap,
    GradientStepMap,
    HiddenPrior,
    HopfieldGradients,
    HopfieldLayer,
    IterationSummary,
    LinearSolveSummary,
    Map,
    ModernHopfieldEnergy,
    PythonMap,
    RbmEnergy,
    Solver,
    SparseHopfieldEnergy,
    Summary,
    backward,
    check_backward_options,
    entmax,
    entmax_jacobian_vector_product,
    mpi_available,
    process_count,
    process_rank,
    solver_library,
    solver_names,
    solver_needs_energy,
    solver_needs_jacobian_products,
    solver_option_names,
    sparsemax,
)

__all__ = [
    "BackwardResult", "CccpMap", "ConvergenceError", "DenseAssociativeMemoryEnergy", "Energy",
    "EnergyRootMap", "EnergyTransformer", "EnergyTransformerMap", "GradientStepMap", "HiddenPrior",
    "HopfieldGradients", "HopfieldLayer",
    "IterationSummary", "LinearSolveSummary", "Map", "ModernHopfieldEnergy", "PythonMap",
    "RbmEnergy", "Solver", "SparseHopfieldEnergy", "Summary", "backward",
    "check_backward_options", "entmax",
    "entmax_jacobian_vector_product", "mpi_available", "process_count", "process_rank", "solve", "solver_library", "solver_names",
    "solver_needs_energy",
    "solver_needs_jacobian_products", "solver_option_names", "sparsemax",
]


def solve(map, z, solver="anderson", options=None, sharded=False, **kwargs):
    """Solves z = map(z) for every column of z in place with the named solver.

    Shorthand for ``Solver(solver, options, **kwargs).solve(map, z, sharded=sharded)``;
    returns the Summary. sharded=True splits the batch over the processes of
    ``mpirun -np K python3 ...`` (see Solver.solve).
    """
    return Solver(solver, options, **kwargs).solve(map, z, sharded=sharded)
