"""Built-in energies from Python: derivatives against finite differences, the
CCCP dynamics' energy descent, zero-copy parameter views, float32 and float64."""
import numpy as np
import pytest

import implicit
from conftest import hopfield_problem


def central_difference(fn, x, h=1e-6):
    """d fn(x) / dx for fn: (n, B) -> (B,), column by column."""
    grad = np.zeros_like(x)
    for i in range(x.shape[0]):
        e = np.zeros_like(x)
        e[i, :] = h
        grad[i, :] = (fn(np.asfortranarray(x + e)) - fn(np.asfortranarray(x - e))) / (2 * h)
    return grad


def energies():
    rng = np.random.default_rng(3)
    X = np.asfortranarray(rng.standard_normal((6, 5)))
    return [
        implicit.ModernHopfieldEnergy(X, beta=1.5),
        implicit.DenseAssociativeMemoryEnergy(X, interaction="polynomial", degree=3),
        implicit.DenseAssociativeMemoryEnergy(0.5 * X, interaction="exponential", beta=0.7,
                                              domain="box"),
        implicit.SparseHopfieldEnergy(X, alpha=1.5, beta=0.8),
        implicit.RbmEnergy(0.5 * X, implicit.HiddenPrior.bernoulli(0.3)),
        implicit.RbmEnergy(0.5 * X, implicit.HiddenPrior.gaussian(0.1, [0.5, 1, 1.5, 1, 0.7]),
                           learn_bias=True),
        implicit.EnergyTransformer(num_tokens=3, token_dim=2, num_heads=2, head_dim=2,
                                   num_memories=3, memory="softmax", seed=4, init_stddev=0.8),
    ]


@pytest.mark.parametrize("energy", energies(), ids=repr)
def test_gradient_and_hessian_match_finite_differences(energy):
    rng = np.random.default_rng(4)
    x = np.asfortranarray(0.3 * rng.standard_normal((6, 3)))
    g = energy.gradient(x)
    assert np.allclose(g, central_difference(energy.value, x), atol=1e-6)
    v = np.asfortranarray(rng.standard_normal((6, 3)))
    h = 1e-6
    fd = (energy.gradient(np.asfortranarray(x + h * v)) -
          energy.gradient(np.asfortranarray(x - h * v))) / (2 * h)
    assert np.allclose(energy.hessian_vector_product(x, v), fd, atol=1e-6)


def test_parameter_views_are_live_and_the_parameter_vjp_matches_finite_differences():
    energy, x = hopfield_problem(beta=2.0)
    beta = energy.parameters["beta"]
    assert beta.shape == (1, 1) and beta[0, 0] == 2.0
    assert energy.parameter_vector.shape == (energy.num_parameters,)
    u = np.asfortranarray(np.random.default_rng(5).standard_normal(x.shape))

    def inner(b):  # sum_b <grad E(x_b; beta = b), u_b>
        beta[0, 0] = b                   # written through the view, no copy
        return float(np.sum(energy.gradient(x) * u))

    h = 1e-6
    fd = (inner(2.0 + h) - inner(2.0 - h)) / (2 * h)
    inner(2.0)
    assert energy.beta == 2.0
    vjp = energy.parameter_vector_jacobian_product(x, u)
    assert vjp.shape == (1,) and vjp[0] == pytest.approx(fd, rel=1e-6)


def test_cccp_dynamics_never_increase_the_energy():
    energy, z = hopfield_problem(beta=1.0, noise=2.0)
    f = implicit.CccpMap(energy)
    values = [energy.value(z)]
    for _ in range(30):
        z = f.evaluate(z)
        values.append(energy.value(z))
    steps = np.diff(np.array(values), axis=0)
    assert np.all(steps <= 1e-12)


def test_attention_is_a_distribution_and_the_cccp_step_is_attention():
    energy, x = hopfield_problem()
    p = energy.attention(x)
    assert p.shape == (12, x.shape[1])
    assert np.all(p >= 0) and np.allclose(p.sum(axis=0), 1.0)
    assert np.allclose(implicit.CccpMap(energy).evaluate(x), energy.patterns @ p)


def test_float32_agrees_with_float64():
    e64, x64 = hopfield_problem(np.float64)
    e32, x32 = hopfield_problem(np.float32)
    assert e32.dtype == "float32" and e64.dtype == "float64"
    assert np.allclose(e32.value(x32), e64.value(x64), rtol=1e-5, atol=1e-5)
    assert np.allclose(e32.gradient(x32), e64.gradient(x64), atol=1e-5)
    with pytest.raises(TypeError, match="x: expected dtype float32"):
        e32.value(x64)


def test_constructor_errors():
    with pytest.raises(ValueError, match="patterns must be non-empty"):
        implicit.ModernHopfieldEnergy(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="patterns: expected a 2-D array"):
        implicit.ModernHopfieldEnergy(np.zeros(3))
    with pytest.raises(TypeError, match="dtype must be float64 or float32"):
        implicit.ModernHopfieldEnergy(np.ones((2, 2)), dtype=np.int32)
    with pytest.raises(ValueError, match="interaction: 'cubic' is unknown"):
        implicit.DenseAssociativeMemoryEnergy(np.ones((2, 2)), interaction="cubic")
    with pytest.raises(ValueError, match="degree must be >= 2"):
        implicit.DenseAssociativeMemoryEnergy(np.ones((2, 2)), interaction="polynomial",
                                              degree=1)
    with pytest.raises(TypeError, match="energy: expected an implicit.Energy"):
        implicit.CccpMap("not an energy")


def test_sparsemax_is_the_projection_onto_the_simplex():
    rng = np.random.default_rng(8)
    s = np.asfortranarray(rng.standard_normal((7, 5)) * 2)
    p = implicit.sparsemax(s)
    assert np.all(p >= 0) and np.allclose(p.sum(axis=0), 1.0)
    assert np.any(p == 0)                        # sparse
    for b in range(s.shape[1]):                  # KKT: p = max(s - tau, 0) for one tau
        support = p[:, b] > 0
        tau = s[support, b] - p[support, b]
        assert np.allclose(tau, tau[0])
        assert np.all(s[~support, b] <= tau[0] + 1e-12)
    softmax = np.exp(s - s.max(axis=0)) / np.exp(s - s.max(axis=0)).sum(axis=0)
    assert np.allclose(implicit.entmax(s, alpha=1.0), softmax)


def test_entmax_jacobian_matches_finite_differences():
    rng = np.random.default_rng(9)
    s = np.asfortranarray(rng.standard_normal((6, 4)))
    v = np.asfortranarray(rng.standard_normal((6, 4)))
    h = 1e-7
    fd = (implicit.entmax(np.asfortranarray(s + h * v), 1.5) -
          implicit.entmax(np.asfortranarray(s - h * v), 1.5)) / (2 * h)
    jv = implicit.entmax_jacobian_vector_product(implicit.entmax(s, 1.5), 1.5, v)
    assert np.allclose(jv, fd, atol=1e-6)


def test_sparse_hopfield_retrieves_separated_patterns_exactly():
    X = np.asfortranarray(np.eye(8)[:, :5] * 3.0)
    energy = implicit.SparseHopfieldEnergy(X, alpha=2.0, beta=2.0)
    assert np.array_equal(energy.attention(X), np.eye(5))
    z = np.asfortranarray(X + 0.2 * np.random.default_rng(1).standard_normal(X.shape))
    s = implicit.solve(implicit.CccpMap(energy), z, "picard", absolute_tolerance=1e-12)
    assert s.is_converged() and np.allclose(z, X, atol=1e-12)


def test_hidden_prior_errors():
    with pytest.raises(ValueError, match="BernoulliPrior: probabilities must be in"):
        implicit.HiddenPrior.bernoulli(1.5)
    with pytest.raises(ValueError, match="rate: expected a number or a 1-D array"):
        implicit.HiddenPrior.poisson([[1.0]])
    with pytest.raises(ValueError, match="visible: 'ternary' is unknown"):
        implicit.RbmEnergy(np.ones((2, 2)), implicit.HiddenPrior.constant(), visible="ternary")
    # per-unit values for fewer hidden units than W's columns: refused at construction
    with pytest.raises(ValueError, match="bernoulli prior has values for 2 hidden units, the weights have 3"):
        implicit.RbmEnergy(np.ones((4, 3)), implicit.HiddenPrior.bernoulli([0.5, 0.5]))


def energy_transformer():
    return implicit.EnergyTransformer(num_tokens=4, token_dim=3, num_heads=2, head_dim=2,
                                      num_memories=5, seed=2)


def test_energy_transformer_dynamics_descend_and_clamps_hold():
    et = energy_transformer()
    assert et.dimension == 12 and et.num_tokens == 4 and et.token_dim == 3
    x = np.asfortranarray(np.random.default_rng(6).standard_normal((12, 3)))
    f = implicit.EnergyTransformerMap(et, step=0.1)
    values = [et.value(x)]
    for _ in range(20):
        x = f.evaluate(x)
        values.append(et.value(x))
    assert np.all(np.diff(np.array(values), axis=0) <= 1e-12)
    free = np.ones((12, 3), order="F")
    free[:3, :] = 0.0                             # token 0 is clamped
    clamp = np.asfortranarray(np.full((12, 3), 0.5))
    f.set_clamp(free, clamp)
    y = f.evaluate(x)
    assert np.allclose(y[:3, :], 0.5)
    with pytest.raises(ValueError, match="memory: 'gelu' is unknown"):
        implicit.EnergyTransformer(num_tokens=2, token_dim=2, memory="gelu")
    with pytest.raises(ValueError, match="token_dim must be >= 2"):
        implicit.EnergyTransformer(num_tokens=2, token_dim=1)
