"""implicit.torch: DEQ gradients against unrolling the solver to convergence in
torch, gradcheck of the DEQ and of the Hopfield layer, Newton on torch maps, and
the failure policies (on_failure) against the batch without the failed sample."""
import warnings

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


def test_unconverged_forward_raises_by_default_with_the_summary():
    deq = itorch.DEQ(Cell(), 6, solver="picard", solver_options={"max_iterations": 2})
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    for grad_mode in (torch.enable_grad, torch.no_grad):
        with grad_mode(), pytest.raises(itorch.ConvergenceError,
                                        match=r"3 of 3 samples failed") as raised:
            deq(x)
        assert isinstance(raised.value, RuntimeError)
        assert raised.value.summary is deq.last_forward_summary
        assert raised.value.summary.sample_status == ["max_iterations"] * 3


def test_unconverged_forward_gives_nan_gradients_not_wrong_ones():
    cell = Cell()
    deq = itorch.DEQ(cell, 6, solver="picard", solver_options={"max_iterations": 2},
                     on_failure="nan")
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    z = deq(x)
    assert deq.last_forward_summary.termination_type == "max_iterations"
    (gx,) = torch.autograd.grad(z.sum(), x)
    assert torch.isnan(gx).all()


def test_require_converged_forward_false_differentiates_the_last_iterate():
    deq = itorch.DEQ(Cell(), 6, solver="picard", solver_options={"max_iterations": 2},
                     require_converged_forward=False)
    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(deq(x).sum(), x)     # no raise: not a failure
    assert torch.isfinite(gx).all() and deq.last_backward_summary.is_converged()


def test_accelerated_solvers_converge_where_picard_does_on_an_attention_map():
    # The user's map of issue 45: f(z, x) = softmax(2 z X + x X) X^T, X of
    # 8 x 20 patterns. Picard converges every sample (211 iterations); without
    # the Picard fallback Anderson stalled on one sample. Every accelerated
    # solver must converge every sample (to a fixed point of f: such a map may
    # have several, so not necessarily Picard's).
    torch.manual_seed(0)
    X = torch.randn(8, 20, dtype=torch.float64) * 0.5

    def f(z, x):
        return torch.softmax(2 * z @ X + x @ X, dim=1) @ X.T

    x = torch.randn(16, 8, dtype=torch.float64)
    options = {"absolute_tolerance": 1e-8, "max_iterations": 3000}
    reference = itorch.DEQ(f, 8, solver="picard", solver_options=options)
    reference(x)
    assert reference.last_forward_summary.is_converged()
    for solver in ("anderson", "broyden"):
        deq = itorch.DEQ(f, 8, solver=solver, solver_options=options)
        z = deq(x).detach()   # on_failure="raise": a lost sample would raise here
        assert deq.last_forward_summary.num_converged == 16
        assert (f(z, x) - z).norm(dim=1).max() <= 1e-7


def test_deq_errors():
    with pytest.raises(ValueError, match="unknown solver"):
        itorch.DEQ(Cell(), 6, solver="nope")
    with pytest.raises(ValueError, match="give method as backward="):
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


# ---- Failure policies ------------------------------------------------------

class GatedCell(Cell):
    """f(z, x) = tanh(W z + U x' + b) + g (z + 1) with x = [x', g]: a contraction
    for g = 0, and for g = 1 a map with no fixed point at all (tanh > -1)."""

    def forward(self, z, x):
        return super().forward(z, x[:, :-1]) + x[:, -1:] * (z + 1)


BAD = 2       # the sample with g = 1


def gated_batch(batch=5, m=3, seed=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, m + 1, dtype=torch.float64, generator=g)
    x[:, -1] = 0
    x[BAD, -1] = 1
    w = torch.randn(batch, 6, dtype=torch.float64, generator=g)
    return x, w


def gated_gradients(x, w, **options):
    """(z*, [dL/dW, dL/dU, dL/db, dL/dx]) of L = sum(w * z*) by a DEQ of GatedCell."""
    cell = GatedCell()
    deq = itorch.DEQ(cell, 6, solver="anderson", solver_options={**TIGHT, "max_iterations": 100},
                     backward_options=ADJOINT, **options)
    x = x.clone().requires_grad_()
    z = deq(x)
    grads = torch.autograd.grad((w * z).sum(), [cell.W, cell.U, cell.b, x])
    return deq, z, grads


def without_bad(t):
    return torch.cat([t[:BAD], t[BAD + 1:]])


def relative_error(a, b):
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def test_a_sample_without_equilibrium_raises_by_default():
    x, w = gated_batch()
    with pytest.raises(itorch.ConvergenceError, match=r"1 of 5 samples failed \(sample 2: ") \
            as raised:
        gated_gradients(x, w)
    status = raised.value.summary.sample_status
    assert status[BAD] != "converged" and status.count("converged") == 4


def test_skip_gives_the_gradients_of_the_other_samples_alone():
    x, w = gated_batch()
    with pytest.warns(RuntimeWarning, match=r"1 of 5 samples failed \(sample 2: failure\)"):
        deq, z, grads = gated_gradients(x, w, on_failure="skip")
    assert deq.last_forward_summary.sample_status[BAD] != "converged"
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the batch without it: no failure, no warning
        deq_ref, z_ref, grads_ref = gated_gradients(without_bad(x), without_bad(w))
    assert deq_ref.last_forward_summary.is_converged()
    assert torch.allclose(without_bad(z), z_ref, atol=1e-11, rtol=0)
    for g, r in zip(grads[:3], grads_ref[:3]):          # W, U, b: shared by every sample
        assert torch.isfinite(g).all()
        assert relative_error(g, r) <= 1e-9
    gx = grads[3]
    assert torch.equal(gx[BAD], torch.zeros_like(gx[BAD]))
    assert relative_error(without_bad(gx), grads_ref[3]) <= 1e-9


def test_nan_poisons_every_shared_gradient():
    x, w = gated_batch()
    _, _, grads = gated_gradients(x, w, on_failure="nan")
    _, _, grads_ref = gated_gradients(without_bad(x), without_bad(w))
    for g in grads[:3]:
        assert torch.isnan(g).all()
    gx = grads[3]
    assert torch.isnan(gx[BAD]).all()
    assert torch.allclose(without_bad(gx), grads_ref[3], rtol=1e-9, atol=0)


def test_a_failed_adjoint_raises_from_backward_or_is_skipped():
    cell = Cell()
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    w = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    w[1, 2] = float("nan")       # sample 1's loss gradient: its adjoint cannot be finite

    def grads(on_failure, w):
        deq = itorch.DEQ(cell, 6, solver_options=TIGHT, backward_options=ADJOINT,
                         on_failure=on_failure)
        z = deq(x)
        assert deq.last_forward_summary.is_converged()
        return deq, torch.autograd.grad((w * z).sum(), [cell.W, cell.U, cell.b])

    with pytest.raises(itorch.ConvergenceError, match=r"1 of 4 samples failed \(sample 1: ") \
            as raised:
        grads("raise", w)
    assert raised.value.summary.sample_status[1] == "non_finite"
    assert raised.value.summary.num_converged == 3
    with pytest.warns(RuntimeWarning, match="1 of 4 samples failed"):
        deq, skipped = grads("skip", w)
    assert deq.last_backward_summary.sample_status[1] == "non_finite"
    w_others = w.clone()
    w_others[1] = 0              # the loss of the other samples alone
    _, reference = grads("raise", w_others)
    for g, r in zip(skipped, reference):
        assert relative_error(g, r) <= 1e-9


def pre_solved_queries(layer, queries, solved):
    """queries whose rows `solved` are replaced by their equilibria (a tight solve)."""
    with torch.no_grad():
        z = layer(queries)
    start = queries.clone()
    start[solved] = z[solved]
    return start


def test_energy_layer_skips_an_unconverged_query_exactly():
    layer, queries = hopfield_layer()
    # Queries 0, 1 and 3 start at their equilibria, query 2 (BAD) does not:
    # two iterations converge the others, not it.
    start = pre_solved_queries(layer, queries, [0, 1, 3])
    w = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(8))

    def grads(z0, w, **options):
        short = itorch.HopfieldRetrieval(layer.X.detach(), beta=0.8, learn_patterns=True,
                                         solver_options={"absolute_tolerance": 1e-10,
                                                         "max_iterations": 2},
                                         backward_options=ADJOINT, **options)
        z = short(z0)
        return short, z, torch.autograd.grad((w * z).sum(), [short.X, short.beta])

    with pytest.raises(itorch.ConvergenceError, match=r"1 of 4 samples failed \(sample 2: "):
        grads(start, w)
    with pytest.warns(RuntimeWarning, match="1 of 4 samples failed"):
        short, z, skipped = grads(start, w, on_failure="skip")
    assert short.last_forward_summary.sample_status[BAD] != "converged"
    _, _, reference = grads(without_bad(start), without_bad(w))
    for g, r in zip(skipped, reference):
        assert torch.isfinite(g).all()
        assert relative_error(g, r) <= 1e-9
    _, _, poisoned = grads(start, w, on_failure="nan")
    assert all(torch.isnan(g).all() for g in poisoned)


def test_hopfield_attention_layer_failure_policies():
    g = torch.Generator().manual_seed(9)
    queries = torch.randn(4, 3, dtype=torch.float64, generator=g)
    patterns = torch.randn(6, 5, dtype=torch.float64, generator=g)
    options = dict(solver="picard", solver_options={"max_iterations": 1}, beta=2.0,
                   query_weight=0.5)
    with pytest.raises(itorch.ConvergenceError, match="samples failed"):
        itorch.HopfieldLayer(3, 5, **options)(queries, patterns)
    layer = itorch.HopfieldLayer(3, 5, on_failure="skip", **options)
    with pytest.warns(RuntimeWarning, match="4 of 4 samples failed"):
        layer(queries, patterns).sum().backward()
    for name, parameter in layer.named_parameters():   # every query skipped: zero gradients
        assert torch.equal(parameter.grad, torch.zeros_like(parameter)), name
    layer = itorch.HopfieldLayer(3, 5, on_failure="nan", **options)
    layer(queries, patterns).sum().backward()
    assert all(torch.isnan(p.grad).all() for p in layer.parameters())


def test_options_are_validated_at_construction():
    import implicit
    energy = implicit.ModernHopfieldEnergy(np.asfortranarray(np.eye(3)))
    modules = [lambda **kw: itorch.DEQ(Cell(), 6, **kw),
               lambda **kw: itorch.EnergyEquilibrium(energy, **kw),
               lambda **kw: itorch.HopfieldRetrieval(torch.eye(3, dtype=torch.float64), **kw),
               lambda **kw: itorch.HopfieldLayer(3, 3, **kw)]
    for make in modules:
        with pytest.raises(ValueError, match="linear_solver 'qr' is unknown"):
            make(backward_options={"linear_solver": "qr"})
        with pytest.raises(ValueError, match="unknown backward option 'tolerence'"):
            make(backward_options={"tolerence": 1e-8})
        with pytest.raises(ValueError, match="tolerance"):
            make(backward_options={"tolerance": -1.0})
        with pytest.raises(ValueError, match="on_failure: 'ignore' is unknown"):
            make(on_failure="ignore")
        with pytest.raises(ValueError, match="give failed_samples as on_failure="):
            make(backward_options={"failed_samples": "skip"})
    with pytest.raises(ValueError, match="give require_converged_forward as "
                                         "require_converged_forward="):
        itorch.DEQ(Cell(), 6, backward_options={"require_converged_forward": False})


# ---- Newton on torch maps (Jacobian-vector products from torch) -------------

class CustomTanh(torch.autograd.Function):
    """tanh without a forward-mode formula: its JVP falls back to double backward."""

    @staticmethod
    def forward(ctx, a):
        y = torch.tanh(a)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


@pytest.mark.parametrize("custom_function", [False, True], ids=["forward_mode", "double_backward"])
def test_newton_on_a_torch_map_matches_picard(custom_function):
    cell = Cell()
    if custom_function:
        def f(z, x):
            return CustomTanh.apply(z @ cell.W.T + x @ cell.U.T + cell.b)
    else:
        f = cell
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7),
                    requires_grad=True)
    w = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    results = {}
    for solver in ("newton", "picard"):
        deq = itorch.DEQ(f, 6, solver=solver, solver_options=TIGHT, backward_options=ADJOINT)
        z = deq(x)
        results[solver] = (deq.last_forward_summary,
                           torch.autograd.grad((w * z).sum(), [cell.W, cell.U, cell.b, x]))
    newton, picard = results["newton"][0], results["picard"][0]
    assert newton.is_converged() and newton.iterations < picard.iterations / 4
    for g, r in zip(results["newton"][1], results["picard"][1]):
        assert relative_error(g, r) <= 1e-9
