"""The solver core from Python: every solver by name, options, Summary,
zero-copy state, errors, NaN isolation, Ctrl-C, callbacks and the GIL."""
import os
import signal
import threading

import numpy as np
import pytest

import implicit
from conftest import hopfield_problem, tolerance


def map_for(solver, energy):
    """The map each solver is meant for (the energy minimisers need E)."""
    if solver in ("newton", "lbfgs", "gradient_flow"):
        return implicit.EnergyRootMap(energy)
    return implicit.CccpMap(energy)


BUILT_IN = [n for n in implicit.solver_names() if implicit.solver_library(n) == "libimplicit"]
BACKENDS = [n for n in implicit.solver_names() if implicit.solver_library(n) != "libimplicit"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_solver_finds_a_fixed_point(name, dtype):
    energy, z = hopfield_problem(dtype)
    f = map_for(name, energy)
    tol = tolerance(dtype)
    options = {"absolute_tolerance": tol, "max_iterations": 5000}
    if name == "gradient_flow":
        options["step_size"] = 0.5
    summary = implicit.solve(f, z, name, options)
    assert summary.is_converged(), summary.full_report()
    assert summary.solver == name
    residual = np.linalg.norm(f.evaluate(z) - z, axis=0)
    assert np.all(residual <= 10 * tol)
    # A fixed point of the CCCP / root map is a stationary point of E.
    assert np.all(np.linalg.norm(energy.gradient(z), axis=0) <= 10 * tol)


def test_backend_solvers_are_reachable_by_name():
    """The KINSOL / PETSc backends this build has: listed after libimplicit's,
    with their library, and solving through the same call (their plain
    fixed-point iteration is the CCCP step Picard takes)."""
    assert implicit.solver_names()[:len(BUILT_IN)] == BUILT_IN
    if not BACKENDS:
        pytest.skip("this build has neither KINSOL nor PETSc (apt-get install libsundials-dev)")
    for name in BACKENDS:
        assert implicit.solver_library(name).startswith(("SUNDIALS KINSOL", "PETSc")), name
    energy, reference = hopfield_problem()
    f = implicit.CccpMap(energy)
    implicit.solve(f, reference, "picard", {"absolute_tolerance": 1e-11, "max_iterations": 5000})
    for name in [n for n in BACKENDS if n == "kinsol-picard"]:
        _, z = hopfield_problem()
        summary = implicit.solve(f, z, name, {"absolute_tolerance": 1e-11, "max_iterations": 5000})
        assert summary.is_converged(), summary.full_report()
        assert np.max(np.abs(z - reference)) <= 1e-8
    with pytest.raises(ValueError, match="record_trace"):
        implicit.Solver(BACKENDS[0], record_trace=True)


def test_solution_is_written_in_place_without_copy():
    energy, z = hopfield_problem()
    address = z.__array_interface__["data"][0]
    before = z.copy(order="F")
    implicit.solve(implicit.CccpMap(energy), z, "picard")
    assert z.__array_interface__["data"][0] == address
    assert not np.array_equal(z, before)
    f = implicit.CccpMap(energy)
    assert np.allclose(f.evaluate(z), z, atol=1e-8)


def test_options_as_dict_and_keywords_are_the_same():
    energy, z1 = hopfield_problem()
    z2 = z1.copy(order="F")
    f = implicit.CccpMap(energy)
    a = implicit.Solver("anderson", {"memory": 3, "mixing": 0.5}).solve(f, z1)
    b = implicit.Solver("anderson", memory=3, mixing=np.float64(0.5)).solve(f, z2)
    assert np.array_equal(z1, z2)
    assert a.iterations == b.iterations
    assert implicit.Solver("anderson", memory=np.int64(3), record_trace=True).options == {
        "memory": "3", "record_trace": "true"}


def test_option_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown solver"):
        implicit.Solver("nope")
    with pytest.raises(ValueError, match=r'unknown option "memroy".*valid options: .*memory'):
        implicit.Solver("anderson", memroy=3)
    with pytest.raises(ValueError, match="memory"):
        implicit.Solver("anderson", memory=-1)
    with pytest.raises(ValueError, match="max_iterations"):
        implicit.Solver("picard", max_iterations="many")
    with pytest.raises(TypeError, match="option 'memory'"):
        implicit.Solver("anderson", memory=[3])
    with pytest.raises(ValueError, match="given twice"):
        implicit.Solver("anderson", {"memory": 3}, memory=4)
    with pytest.raises(TypeError, match="callback"):
        implicit.Solver("picard", callback=3)
    assert "memory" in implicit.solver_option_names("anderson")
    assert implicit.solver_needs_energy("lbfgs") and not implicit.solver_needs_energy("picard")
    assert implicit.solver_needs_jacobian_products("newton")


def test_summary_reports_every_counter():
    energy, z = hopfield_problem(batch=5)
    s = implicit.solve(implicit.CccpMap(energy), z, "anderson", record_trace=True)
    assert s.num_samples == 5 and s.num_converged == 5
    assert s.termination_type == "converged" and s.is_converged()
    assert s.sample_status == ["converged"] * 5
    for field in ("sample_residual", "sample_iterations", "sample_evaluations",
                  "sample_accelerated_steps", "sample_backtracks", "sample_fallbacks"):
        assert getattr(s, field).shape == (5,), field
    assert s.sample_residual.max() == pytest.approx(s.absolute_residual)
    assert s.total_sample_evaluations == s.sample_evaluations.sum()
    assert len(s.trace["max_residual"]) == s.iterations + 1
    assert s.trace["max_residual"][-1] == pytest.approx(s.absolute_residual)
    assert "anderson" in s.brief_report() and "converged" in s.full_report()
    assert s.wall_time_seconds >= 0 and s.function_evaluations >= s.iterations


@pytest.mark.parametrize("bad, error, message", [
    ([[0.0] * 6] * 16, TypeError, "z: expected a numpy array"),
    (np.zeros((16, 6), dtype=np.float32, order="F"), TypeError, "z: expected dtype float64"),
    (np.zeros((16, 6), dtype=np.int64, order="F"), TypeError, "z: expected dtype float64"),
    (np.zeros((16, 6), order="C"), ValueError, "z: expected a Fortran-ordered"),
    (np.zeros((15, 6), order="F"), ValueError, r"z: expected shape \(16, batch\)"),
    (np.zeros(16), ValueError, "z: expected a 2-D array"),
    (np.zeros((16, 6), order="F")[:, ::2], ValueError, "z: expected a Fortran-ordered"),
])
def test_bad_state_raises_naming_the_argument(bad, error, message):
    energy, _ = hopfield_problem()
    with pytest.raises(error, match=message):
        implicit.solve(implicit.CccpMap(energy), bad, "picard")


def test_read_only_state_raises():
    energy, z = hopfield_problem()
    z.setflags(write=False)
    with pytest.raises(ValueError, match="z: the array is read-only"):
        implicit.solve(implicit.CccpMap(energy), z, "picard")


def test_cpp_exceptions_arrive_with_their_message():
    energy, _ = hopfield_problem()
    with pytest.raises(ValueError, match="GradientStepMap: step must be finite and > 0"):
        implicit.GradientStepMap(energy, -1.0)
    with pytest.raises(ValueError, match="ModernHopfieldEnergy: beta must be finite and > 0"):
        implicit.ModernHopfieldEnergy(np.ones((3, 2)), beta=0.0)
    with pytest.raises(ValueError, match="lbfgs"):
        implicit.solve(implicit.PythonMap(3, lambda z: z), np.zeros((3, 1), order="F"), "lbfgs")


def affine_map(n=4, seed=1):
    """f(z) = A z + c with |A| < 1, and its exact fixed point."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n))
    A *= 0.5 / np.linalg.norm(A, 2)
    c = rng.standard_normal((n, 1))
    fixed = np.linalg.solve(np.eye(n) - A, c)
    return A, c, fixed


def test_python_map_converges_to_its_fixed_point(dtype):
    A, c, fixed = affine_map()
    f = implicit.PythonMap(4, lambda z: A @ z + c, dtype=dtype)
    z = np.zeros((4, 3), dtype=dtype, order="F")
    s = implicit.solve(f, z, "anderson", absolute_tolerance=tolerance(dtype))
    assert s.is_converged()
    assert np.allclose(z, np.repeat(fixed, 3, axis=1), atol=10 * tolerance(dtype))


def test_newton_uses_the_python_jvp():
    A, c, fixed = affine_map()
    calls = []

    def jvp(z, v):
        calls.append(z.shape)
        return A @ v

    f = implicit.PythonMap(4, lambda z: A @ z + c, jvp=jvp)
    z = np.zeros((4, 2), order="F")
    assert implicit.solve(f, z, "newton").is_converged()
    assert calls and np.allclose(z[:, :1], fixed, atol=1e-8)


def test_nan_in_one_sample_stays_in_that_sample():
    A, c, fixed = affine_map()

    def f(z):
        out = A @ z + c
        out[:, 0] = np.nan
        return out

    z = np.zeros((4, 3), order="F")
    s = implicit.solve(implicit.PythonMap(4, f), z, "anderson")
    assert s.sample_status == ["non_finite", "converged", "converged"]
    assert np.all(np.isfinite(z))        # reset to the best finite iterate
    assert np.allclose(z[:, 1:], np.repeat(fixed, 2, axis=1), atol=1e-8)


def test_exception_in_python_map_stops_the_solve_and_is_raised():
    A, c, _ = affine_map()
    calls = [0]

    def f(z):
        calls[0] += 1
        if calls[0] == 5:
            raise ArithmeticError("map failed at call 5")
        return A @ z + c

    z = np.zeros((4, 2), order="F")
    with pytest.raises(ArithmeticError, match="map failed at call 5") as info:
        implicit.solve(implicit.PythonMap(4, f), z, "picard", absolute_tolerance=0.0)
    assert calls[0] == 5                 # Python was not called again after the error
    assert info.value.summary.termination_type in ("user_abort", "non_finite")
    assert np.all(np.isfinite(z))


@pytest.mark.parametrize("result, message", [
    (lambda z: z[:-1], r"f returned shape \(3, 2\), expected \(4, 2\)"),
    (lambda z: "text", "f returned a str that is not an array of numbers"),
])
def test_bad_python_map_results_raise(result, message):
    z = np.zeros((4, 2), order="F")
    with pytest.raises((ValueError, TypeError), match=message):
        implicit.solve(implicit.PythonMap(4, result), z, "picard")


def test_callback_stops_the_solve():
    energy, z = hopfield_problem()
    seen = []

    def callback(it):
        seen.append(it.iteration)
        return it.iteration >= 3

    f = implicit.GradientStepMap(energy, 1e-3)
    s = implicit.solve(f, z, "picard", callback=callback, absolute_tolerance=0.0)
    assert s.termination_type == "user_abort"
    assert s.iterations == 3 and seen[-1] == 3


def test_exception_in_callback_is_raised_with_the_summary():
    energy, z = hopfield_problem()

    def callback(it):
        if it.iteration == 2:
            raise LookupError("from the callback")

    with pytest.raises(LookupError, match="from the callback") as info:
        implicit.solve(implicit.GradientStepMap(energy, 1e-3), z, "picard", callback=callback)
    assert info.value.summary.iterations == 2


def slow_problem():
    """A solve that would run for minutes: tiny gradient steps, no tolerance."""
    energy, z = hopfield_problem(n=64, patterns=400, batch=64)
    f = implicit.GradientStepMap(energy, 1e-9)
    options = dict(absolute_tolerance=0.0, max_iterations=10**8, max_stall_iterations=0)
    return f, z, options


def test_ctrl_c_stops_a_long_solve_with_the_best_state():
    f, z, options = slow_problem()
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            implicit.solve(f, z, "picard", options)
    finally:
        timer.cancel()
    summary = info.value.summary
    assert summary.termination_type == "user_abort"
    assert 0 < summary.iterations < options["max_iterations"]
    assert np.all(np.isfinite(z))


def test_the_gil_is_released_while_cpp_solves():
    f, z, options = slow_problem()
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    def callback(it):
        return it.seconds > 0.3

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        implicit.solve(f, z, "picard", options, callback=callback)
    finally:
        stop.set()
        thread.join()
    # With the GIL held for the whole solve the thread could not count at all.
    assert count[0] > 10000
