"""implicit.HopfieldLayer and implicit.torch.HopfieldLayer: one step is exactly
multi-head softmax attention; gradients pass gradcheck in both modes."""
import numpy as np
import pytest

import implicit


def attention_reference(layer, R, Y, heads, dk, dv):
    """Multi-head softmax attention from the layer's own parameter values."""
    P = layer.parameters
    beta = P["beta"][0, 0]
    q, K, V = P["W_Q"] @ R, P["W_K"] @ Y, P["W_V"] @ Y
    outputs = []
    for h in range(heads):
        scores = beta * K[h * dk:(h + 1) * dk].T @ q[h * dk:(h + 1) * dk]
        p = np.exp(scores - scores.max(axis=0))
        p /= p.sum(axis=0)
        outputs.append(V[h * dv:(h + 1) * dv] @ p)
    return P["W_O"] @ np.vstack(outputs)


def test_one_step_is_multi_head_softmax_attention():
    rng = np.random.default_rng(0)
    layer = implicit.HopfieldLayer(6, 5, num_heads=2, head_dim=3, value_dim=2, output_dim=4,
                                   one_step=True, seed=3)
    R = np.asfortranarray(rng.standard_normal((6, 7)))
    Y = np.asfortranarray(rng.standard_normal((5, 9)))
    Z = layer.forward(R, Y)
    assert Z.shape == (4, 7) and layer.output_dim == 4
    assert np.allclose(Z, attention_reference(layer, R, Y, 2, 3, 2), atol=1e-12)


def test_retrieval_converges_and_backward_needs_a_forward():
    layer = implicit.HopfieldLayer(4, 4, num_heads=2, solver=implicit.Solver("anderson"),
                                   backward={"linear_solver": "minres"})
    with pytest.raises(RuntimeError, match="call forward first"):
        layer.backward(np.zeros((4, 3), order="F"))
    rng = np.random.default_rng(1)
    R = np.asfortranarray(rng.standard_normal((4, 3)))
    Y = np.asfortranarray(rng.standard_normal((4, 5)))
    layer.forward(R, Y)
    assert layer.summary.is_converged() and layer.summary.solver == "anderson"
    g = layer.backward(np.asfortranarray(rng.standard_normal((4, 3))))
    assert g.ok and g.parameters.shape == (sum(v.size for v in layer.parameters.values()),)
    assert np.all(g.queries == 0)         # retrieval with query_weight 0: zero, as documented
    with pytest.raises(ValueError, match="unknown backward option 'tol'"):
        implicit.HopfieldLayer(4, 4, backward={"tol": 1e-8})
    with pytest.raises(ValueError, match="HopfieldLayer: query_weight must be in"):
        implicit.HopfieldLayer(4, 4, query_weight=1.0)


torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import implicit.torch as itorch  # noqa: E402


@pytest.mark.parametrize("options", [
    {"one_step": True},
    {"query_weight": 0.5, "solver": "anderson",
     "solver_options": {"absolute_tolerance": 1e-13, "max_iterations": 500},
     "backward_options": {"tolerance": 1e-13}},
], ids=["one_step", "retrieval"])
def test_torch_hopfield_layer_gradcheck(options):
    layer = itorch.HopfieldLayer(4, 3, num_heads=2, head_dim=2, value_dim=2, output_dim=3,
                                 seed=5, **options)
    assert {name for name, _ in layer.named_parameters()} == {"W_Q", "W_K", "W_V", "W_O",
                                                              "beta"}
    g = torch.Generator().manual_seed(2)
    R = torch.randn(3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    Y = torch.randn(5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    names = [name for name, _ in layer.named_parameters()]

    def attend(R, Y, *parameters):
        return itorch._HopfieldAttention.apply(layer, R, Y, None, *parameters)

    inputs = (R, Y) + tuple(getattr(layer, n).detach().clone().requires_grad_() for n in names)
    assert torch.autograd.gradcheck(attend, inputs)
    Z = layer(R, Y, mask=torch.tensor([0.0, 0.0, float("-inf"), 0.0, 0.0]))
    assert Z.shape == (3, 3)
    Z.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
