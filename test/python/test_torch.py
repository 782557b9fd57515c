"""implicit.torch: DEQ gradients against unrolling the solver to convergence in
torch, gradcheck of the DEQ and of the Hopfield layer, NaN for failed solves."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import implicit.torch as itorch  # noqa: E402


class Cell(torch.nn.Module):
    """f(z, x) = tanh(W z + U x + b), a contraction for |W| < 1."""

    def __init__(self, n=6, m=3, scale=0.6, dtype=torch.float64, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        W = torch.randn(n, n, generator=g, dtype=dtype)
        self.W = torch.nn.Parameter(scale * W / torch.linalg.matrix_norm(W, 2))
        self.U = torch.nn.Parameter(torch.randn(n, m, generator=g, dtype=dtype))
        self.b = torch.nn.Parameter(0.1 * torch.randn(n, generator=g, dtype=dtype))

    def forward(self, z, x):
        return torch.tanh(z @ self.W.T + x @ self.U.T + self.b)


TIGHT = {"absolute_tolerance": 1e-13, "max_iterations": 500}
ADJOINT = {"tolerance": 1e-13}


def unrolled(cell, x, steps=200):
    z = torch.zeros(x.shape[0], cell.W.shape[0], dtype=x.dtype)
    for _ in range(steps):
        z = cell(z, x)
    return z


def test_deq_matches_unrolling_to_convergence():
    cell = Cell()
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    target = torch.randn(5, 6, dtype=torch.float64)
    deq = itorch.DEQ(cell, 6, solver="anderson", solver_options=TIGHT,
                     backward_options=ADJOINT)
    z = deq(x)
    assert deq.last_forward_summary.is_converged()
    z_ref = unrolled(cell, x)
    assert torch.allclose(z, z_ref, atol=1e-12, rtol=0)
    params = [cell.W, cell.U, cell.b, x]
    grads = torch.autograd.grad(((z - target) ** 2).sum(), params)
    grads_ref = torch.autograd.grad(((z_ref - target) ** 2).sum(), params)
    assert deq.last_backward_summary.is_converged()
    for g, r in zip(grads, grads_ref):
        assert torch.linalg.norm(g - r) <= 1e-8 * torch.linalg.norm(r)


@pytest.mark.parametrize("linear_solver", ["gmres", "fixed_point", "broyden", "direct"])
def test_deq_gradcheck(linear_solver):
    cell = Cell(n=4, m=2)
    U, b = cell.U.detach(), cell.b.detach()

    def solve(x, W):   # a DEQ whose f closes over the W gradcheck perturbs
        deq = itorch.DEQ(lambda z, x: torch.tanh(z @ W.T + x @ U.T + b), 4, solver="broyden",
                         solver_options=TIGHT,
                         backward_options={"linear_solver": linear_solver, "tolerance": 1e-13})
        return deq(x)

    x = torch.randn(3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2),
                    requires_grad=True)
    W = cell.W.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(solve, (x, W))


def test_deq_float32_runs_and_agrees_with_float64():
    cell64 = Cell()
    cell32 = Cell().float()
    x = torch.randn(4, 3, dtype=torch.float64)
    z64 = itorch.DEQ(cell64, 6, solver_options=TIGHT)(x)
    deq32 = itorch.DEQ(cell32, 6, solver_options={"absolute_tolerance": 1e-5})
    z32 = deq32(x.float())
    assert z32.dtype == torch.float32 and deq32.last_forward_summary.is_converged()
    assert torch.allclose(z32.double(), z64, atol=1e-4)


def test_unconverged_forward_gives_nan_gradients_not_wrong_ones():
    cell = Cell()
    deq = itorch.DEQ(cell, 6, solver="picard", solver_options={"max_iterations": 2})
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    z = deq(x)
    assert deq.last_forward_summary.termination_type == "max_iterations"
    (gx,) = torch.autograd.grad(z.sum(), x)
    assert torch.isnan(gx).all()


def test_deq_errors():
    with pytest.raises(ValueError, match="unknown solver"):
        itorch.DEQ(Cell(), 6, solver="nope")
    with pytest.raises(ValueError, match="give the method as backward"):
        itorch.DEQ(Cell(), 6, backward_options={"method": "phantom"})
    deq = itorch.DEQ(Cell(), 6)
    with pytest.raises(TypeError, match="float64 or float32"):
        deq(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"z0: expected shape \(2, 6\)"):
        deq(torch.zeros(2, 3, dtype=torch.float64), z0=torch.zeros(2, 5, dtype=torch.float64))


def hopfield_layer(learn_patterns=True):
    g = torch.Generator().manual_seed(3)
    patterns = torch.randn(5, 7, dtype=torch.float64, generator=g)
    layer = itorch.HopfieldRetrieval(patterns, beta=0.8, learn_patterns=learn_patterns,
                                     solver_options=TIGHT, backward_options=ADJOINT)
    queries = torch.randn(4, 5, dtype=torch.float64, generator=g)
    return layer, queries


def test_hopfield_layer_is_at_the_equilibrium_and_has_parameters():
    layer, queries = hopfield_layer()
    z = layer(queries)
    assert layer.last_forward_summary.is_converged()
    X, beta = layer.X, layer.beta
    p = torch.softmax(beta * (z @ X), dim=1)          # (batch, N)
    assert torch.allclose(p @ X.T, z, atol=1e-11)
    assert {name for name, _ in layer.named_parameters()} == {"X", "beta"}


def gradcheck_layer(layer, z0):
    """gradcheck of z*(theta) over every parameter block of the layer."""
    names = [name for name, _ in layer.named_parameters()]

    def equilibrium(*parameters):
        return itorch._EnergyEquilibrium.apply(layer, z0, *parameters)

    inputs = tuple(getattr(layer, name).detach().clone().requires_grad_() for name in names)
    return torch.autograd.gradcheck(equilibrium, inputs)


def test_hopfield_layer_gradcheck():
    layer, queries = hopfield_layer()
    assert gradcheck_layer(layer, queries)


def test_energy_layers_gradcheck():
    import implicit
    rng = np.random.default_rng(11)
    W = np.asfortranarray(0.4 * rng.standard_normal((5, 4)))
    z0 = torch.from_numpy(rng.standard_normal((3, 5)))
    rbm = itorch.EnergyEquilibrium(
        implicit.RbmEnergy(W, implicit.HiddenPrior.bernoulli(0.4), learn_bias=True),
        solver_options=TIGHT, backward_options=ADJOINT)
    assert {name for name, _ in rbm.named_parameters()} == {"W", "b"}
    assert gradcheck_layer(rbm, z0)
    sparse = implicit.SparseHopfieldEnergy(np.asfortranarray(rng.standard_normal((5, 6))),
                                           alpha=1.5, beta=0.5)
    layer = itorch.EnergyEquilibrium(sparse, map=implicit.CccpMap(sparse),
                                     solver_options=TIGHT, backward_options=ADJOINT)
    assert gradcheck_layer(layer, z0)
    with pytest.raises(ValueError, match="map: must be built from this energy"):
        itorch.EnergyEquilibrium(sparse, map=implicit.CccpMap(rbm.energy))
    with pytest.raises(TypeError, match="z0: expected dtype float64"):
        layer(z0.float())


def test_hopfield_layer_trains_beta():
    layer, queries = hopfield_layer(learn_patterns=False)
    target = layer(queries).detach() * 0.9
    optimizer = torch.optim.SGD(layer.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = ((layer(queries) - target) ** 2).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert layer.beta.grad is not None and torch.isfinite(layer.beta.grad).all()
    assert all(later < earlier for earlier, later in zip(losses, losses[1:]))
