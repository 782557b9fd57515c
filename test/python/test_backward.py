"""Implicit gradients from Python: IFT gradients against finite differences of
converged solves, every adjoint linear solver, Python maps' VJPs."""
import numpy as np
import pytest

import implicit
from conftest import hopfield_problem


def loss_and_equilibrium(beta, target, solver="anderson"):
    energy, z = hopfield_problem(beta=beta, noise=1.0)
    f = implicit.CccpMap(energy)
    s = implicit.solve(f, z, solver, absolute_tolerance=1e-13, max_iterations=2000)
    assert s.is_converged()
    return 0.5 * float(np.sum((z - target) ** 2)), z, f


@pytest.mark.parametrize("linear_solver",
                         ["auto", "minres", "gmres", "cg", "fixed_point", "anderson", "broyden",
                          "direct"])
def test_ift_gradient_matches_finite_differences_of_converged_solves(linear_solver):
    beta = 1.2
    target = np.asfortranarray(np.random.default_rng(7).standard_normal((16, 6)))
    _, z, f = loss_and_equilibrium(beta, target)
    result = implicit.backward(f, z, np.asfortranarray(z - target),
                               linear_solver=linear_solver)
    assert result.ok, result.summary.brief_report()
    h = 1e-5
    fd = (loss_and_equilibrium(beta + h, target)[0] -
          loss_and_equilibrium(beta - h, target)[0]) / (2 * h)
    assert result.parameter_gradient.shape == (1,)     # the block "beta"
    assert result.parameter_gradient[0] == pytest.approx(fd, rel=1e-5, abs=1e-9)
    assert result.adjoint.shape == z.shape and result.input_gradient.size == 0


def test_python_map_adjoint_solves_the_transposed_system():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((5, 5))
    A *= 0.6 / np.linalg.norm(A, 2)
    f = implicit.PythonMap(5, lambda z: A @ z, vjp=lambda z, u: A.T @ u)
    z = np.zeros((5, 2), order="F")
    g = np.asfortranarray(rng.standard_normal((5, 2)))
    result = implicit.backward(f, z, g)
    assert result.ok and result.summary.solver == "gmres"
    assert np.allclose((np.eye(5) - A).T @ result.adjoint, g, atol=1e-9)


def test_backward_errors():
    energy, z = hopfield_problem()
    f = implicit.CccpMap(energy)
    with pytest.raises(ValueError, match="method: 'nope' is unknown"):
        implicit.backward(f, z, z, method="nope")
    with pytest.raises(ValueError, match="linear_solver 'qr' is unknown"):
        implicit.backward(f, z, z, linear_solver="qr")
    with pytest.raises(ValueError, match=r"grad_z: expected shape \(16, 6\)"):
        implicit.backward(f, z, np.zeros((16, 5), order="F"))
    no_vjp = implicit.PythonMap(16, lambda z: z)
    with pytest.raises((ValueError, RuntimeError), match="vjp|Jacobian"):
        implicit.backward(no_vjp, z, z)


def test_failed_sample_policies():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4))
    A *= 0.5 / np.linalg.norm(A, 2)
    f = implicit.PythonMap(4, lambda z: A @ z, vjp=lambda z, u: A.T @ u)
    z = np.zeros((4, 3), order="F")
    g = np.asfortranarray(rng.standard_normal((4, 3)))
    g[1, 1] = np.nan                  # sample 1's adjoint cannot be finite
    nan = implicit.backward(f, z, g)
    assert not nan.ok and nan.summary.sample_status[1] == "non_finite"
    assert np.isnan(nan.adjoint[:, 1]).all()
    skip = implicit.backward(f, z, g, failed_samples="skip")
    assert not skip.ok and (skip.adjoint[:, 1] == 0).all()
    assert np.allclose(skip.adjoint[:, [0, 2]], nan.adjoint[:, [0, 2]], rtol=1e-12, atol=0)
    with pytest.raises(implicit.ConvergenceError, match=r"1 of 3 samples failed") as raised:
        implicit.backward(f, z, g, failed_samples="throw")
    assert isinstance(raised.value, RuntimeError)
    assert isinstance(raised.value.summary, implicit.LinearSolveSummary)
    assert raised.value.summary.sample_status == ["converged", "non_finite", "converged"]


def test_forward_summary_rejects_unconverged_samples():
    energy, z = hopfield_problem(batch=3)
    f = implicit.CccpMap(energy)
    forward = implicit.solve(f, z, "picard", max_iterations=1)
    assert not forward.is_converged()
    with pytest.raises(implicit.ConvergenceError, match="forward solve did not converge"):
        implicit.backward(f, z, z, forward_summary=forward, failed_samples="throw")
    skip = implicit.backward(f, z, z, forward_summary=forward, failed_samples="skip")
    assert skip.summary.sample_status == ["failure"] * 3
    assert (skip.parameter_gradient == 0).all()       # nothing left to sum
    lenient = implicit.backward(f, z, z, forward_summary=forward, require_converged_forward=False)
    assert lenient.ok
    with pytest.raises(TypeError, match="forward_summary: expected an implicit.Summary"):
        implicit.backward(f, z, z, forward_summary="no")


def test_a_python_maps_own_exception_wins_over_convergence_error():
    def vjp(z, u):
        raise KeyError("from vjp")

    f = implicit.PythonMap(2, lambda z: 0.5 * z, vjp=vjp)
    z = np.zeros((2, 2), order="F")
    with pytest.raises(KeyError, match="from vjp"):
        implicit.backward(f, z, np.ones((2, 2), order="F"), failed_samples="throw")


def test_check_backward_options():
    assert implicit.check_backward_options(linear_solver="gmres", failed_samples="skip") is None
    with pytest.raises(ValueError, match="failed_samples: 'drop' is unknown"):
        implicit.check_backward_options(failed_samples="drop")
    with pytest.raises(ValueError, match="unknown backward option 'tol'"):
        implicit.check_backward_options(tol=1e-3)
    # A value of the wrong type: TypeError naming the key and the type it takes.
    with pytest.raises(TypeError, match="tolerance: expected a float, got str"):
        implicit.check_backward_options(tolerance="abc")
    with pytest.raises(TypeError, match="method: expected a str, got int"):
        implicit.check_backward_options(method=3)
    with pytest.raises(TypeError, match="max_iterations: expected an int"):
        implicit.check_backward_options(max_iterations=2**40)
