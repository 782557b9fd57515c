"""PyTorch integration: equilibrium layers whose forward pass is a C++ solve and
whose backward pass is the implicit function theorem with a C++ linear solver.

    import torch
    import implicit.torch as itorch

    class Cell(torch.nn.Module):                     # f(z, x) = tanh(W z + U x + b)
        def __init__(self, n, m):
            super().__init__()
            self.W = torch.nn.Linear(n, n, bias=False)
            self.U = torch.nn.Linear(m, n)
        def forward(self, z, x):
            return torch.tanh(self.W(z) + self.U(x))

    deq = itorch.DEQ(Cell(32, 10), dimension=32, solver="anderson",
                     solver_options={"absolute_tolerance": 1e-10})
    z = deq(x)                                     # x: (batch, 10) -> z*: (batch, 32)
    loss = z.square().sum(); loss.backward()         # exact implicit gradients for W, U

Tensors are batch-first, (batch, dimension), as usual in PyTorch; C-contiguous
(batch, n) memory is exactly the library's (n, batch) column-major layout, so
states cross between torch and C++ as views, without transposing copies.
Double (float64) and float (float32) tensors on the CPU are supported.

A sample whose forward solve did not converge, or whose adjoint solve failed,
is a failed sample; every module's `on_failure` says what happens then:
"raise" (default) raises ConvergenceError (with `.summary`) from the forward
pass, or from backward() for an adjoint failure; "skip" gives the sample zero
gradient everywhere (the gradients are those of the batch without it) and
warns (RuntimeWarning); "nan" gives it NaN gradients, which reach the shared
parameters. `last_forward_summary` and `last_backward_summary` say what happened.
"""

import warnings

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from . import _implicit

__all__ = ["ConvergenceError", "DEQ", "EnergyEquilibrium", "HopfieldLayer", "HopfieldRetrieval"]

# A RuntimeError whose `summary` says which samples failed and why: the forward
# Summary, or the backward LinearSolveSummary (raised by the C++ backward pass).
ConvergenceError = _implicit.ConvergenceError

# on_failure -> the C++ BackwardOptions::failed_samples that implements it.
_FAILED_SAMPLES = {"raise": "throw", "skip": "skip", "nan": "nan"}


def _dtype_name(dtype):
    if dtype == torch.float64:
        return "float64"
    if dtype == torch.float32:
        return "float32"
    raise TypeError(f"implicit.torch: tensors must be float64 or float32, got {dtype}")


def _columns(tensor):
    """A (batch, n) tensor as a (n, batch) Fortran-ordered numpy view (no copy)."""
    return tensor.detach().contiguous().numpy().T


def _split_parameters(flat, views):
    """A flat parameter gradient as one contiguous tensor per block of `views`."""
    blocks, offset = [], 0
    for view in views.values():
        block = flat[offset:offset + view.size].reshape(view.shape, order="F")
        offset += view.size
        blocks.append(torch.from_numpy(np.ascontiguousarray(block)))
    return blocks


def _backward_keywords(backward_options, on_failure, **arguments):
    """implicit.backward's keywords for a module: backward_options, the module's
    own `arguments` (keyword -> (argument name, value)) and on_failure's
    failed_samples; validated here, so that a bad key or value raises ValueError
    when the module is built rather than at its first backward()."""
    if on_failure not in _FAILED_SAMPLES:
        raise ValueError(f"on_failure: '{on_failure}' is unknown (raise, skip, nan)")
    arguments["failed_samples"] = ("on_failure", _FAILED_SAMPLES[on_failure])
    arguments["drop_failed_samples"] = ("on_failure", None)
    options = dict(backward_options or {})
    for key, (argument, value) in arguments.items():
        if key in options:
            raise ValueError(f"backward_options: give {key} as {argument}=...")
        if value is not None:
            options[key] = value
    _implicit.check_backward_options(**options)
    return options


def _failed_report(statuses):
    """'k of B samples failed (sample 3: max_iterations, ...)', as the C++ messages say it."""
    failed = [f"sample {b}: {status}" for b, status in enumerate(statuses)
              if status != "converged"]
    named = ", ".join(failed[:8]) + (", ..." if len(failed) > 8 else "")
    return f"{len(failed)} of {len(statuses)} samples failed ({named})"


def _check_forward(module, summary):
    """Raises ConvergenceError for on_failure="raise" when a sample of the forward
    solve did not converge (and require_converged_forward: otherwise such a
    sample is differentiated at its last iterate, not a failure)."""
    if (module.on_failure == "raise" and not summary.is_converged()
            and module.backward_options.get("require_converged_forward", True)):
        error = ConvergenceError(
            f"{type(module).__name__}: the forward solve did not converge: "
            f"{_failed_report(summary.sample_status)}; {summary.message} (on_failure='skip' "
            "trains on the other samples; the error's .summary has the details)")
        error.summary = summary
        raise error


def _backward_pass(module, run):
    """run() -> (result, its LinearSolveSummary): one backward pass of `module`.
    Records last_backward_summary, also when a failure raises ConvergenceError
    (on_failure="raise"), and warns when on_failure="skip" dropped samples."""
    try:
        result, summary = run()
    except ConvergenceError as error:
        module.last_backward_summary = error.summary
        raise
    module.last_backward_summary = summary
    if module.on_failure == "skip" and not summary.is_converged():
        warnings.warn(f"{type(module).__name__}: {_failed_report(summary.sample_status)} and "
                      "were skipped: they contribute zero gradient (on_failure='skip'; see "
                      "last_backward_summary)", RuntimeWarning, stacklevel=3)
    return result


def _jacobian_vector_product(fn, z, v):
    """J v, J = dfn/dz at z, by forward-mode AD (torch.autograd.forward_ad, which
    torch.func.jvp builds on: exact, about one evaluation of fn). A function with
    an operation that has no forward-mode formula (a custom autograd.Function
    without jvp) falls back to double backward (torch.autograd.functional.jvp)."""
    try:
        with torch.no_grad(), forward_ad.dual_level():
            tangent = forward_ad.unpack_dual(fn(forward_ad.make_dual(z, v))).tangent
        return torch.zeros_like(z) if tangent is None else tangent   # fn constant in z
    except NotImplementedError:
        return torch.autograd.functional.jvp(fn, z, v)[1]


class DEQ(torch.nn.Module):
    """z* = f(z*, x): a deep-equilibrium layer around a torch function f.

    f(z, x) -> tensor shaped like z, for z of shape (batch, dimension); f may be
    an nn.Module (its parameters are this module's parameters). The forward
    solve runs the named C++ solver on f evaluated under no_grad, with
    Jacobian-vector products from torch's forward-mode AD (so "newton" works);
    the output is f(z*, x) recorded by autograd (equal to z* within the
    tolerance), and its gradient is replaced by the adjoint u that solves
    (I - J)^T u = dL/dz* (J = df/dz at z*), found by the named C++ linear solver
    with vector-Jacobian products from torch.autograd. Parameters of f and x then
    receive exact implicit gradients; the solver is never unrolled. f must treat
    the samples (rows) independently, as the per-sample convergence test assumes.

    solver / solver_options: implicit.Solver's name and options.
    backward: "implicit" (exact), "jacobian_free" or "phantom" (approximations).
    backward_options: implicit.backward's keywords (linear_solver, tolerance, ...),
    validated here (ValueError).
    require_converged_forward: a sample whose forward solve did not converge is a
    failed sample (default True); False differentiates it at its last iterate.
    on_failure: "raise" (default: ConvergenceError from forward() or backward()),
    "skip" (failed samples get zero gradient; warns) or "nan" (NaN gradients).
    """

    def __init__(self, f, dimension, solver="anderson", solver_options=None,
                 backward="implicit", backward_options=None, require_converged_forward=True,
                 on_failure="raise"):
        super().__init__()
        if dimension < 1:
            raise ValueError(f"dimension: must be >= 1, got {dimension}")
        self.f = f
        self.dimension = int(dimension)
        self.solver = _implicit.Solver(solver, solver_options)
        self.backward_options = _backward_keywords(
            backward_options, on_failure, method=("backward", backward),
            require_converged_forward=("require_converged_forward",
                                       bool(require_converged_forward)))
        self.on_failure = on_failure
        self.last_forward_summary = None
        self.last_backward_summary = None

    def forward(self, x, z0=None):
        batch = x.shape[0]
        dtype = x.dtype if z0 is None else z0.dtype
        name = _dtype_name(dtype)
        if z0 is None:
            z0 = torch.zeros(batch, self.dimension, dtype=dtype)
        if z0.shape != (batch, self.dimension):
            raise ValueError(f"z0: expected shape ({batch}, {self.dimension}), got "
                             f"{tuple(z0.shape)}")
        x_data = x.detach()

        def f_data(z):
            return self.f(z, x_data)

        def evaluate(z_columns):
            with torch.no_grad():
                return _columns(f_data(torch.from_numpy(z_columns.T)))

        def jvp(z_columns, v_columns):
            return _columns(_jacobian_vector_product(f_data, torch.from_numpy(z_columns.T),
                                                     torch.from_numpy(v_columns.T)))

        state = _columns(z0.detach().clone())
        summary = self.solver.solve(
            _implicit.PythonMap(self.dimension, evaluate, jvp=jvp, dtype=name), state)
        self.last_forward_summary = summary
        _check_forward(self, summary)
        z_star = torch.from_numpy(state.T.copy())

        # One application of f with the autograd graph attached to x and f's
        # parameters; its incoming gradient is swapped for the IFT adjoint.
        z = self.f(z_star, x)
        if z.requires_grad:
            z.register_hook(lambda grad: self._adjoint(z_star, x_data, grad, summary))
        return z

    def _adjoint(self, z_star, x, grad, forward_summary):
        if grad is None:      # an undefined (zero) gradient stays undefined
            return None
        z_leaf = z_star.detach().requires_grad_()
        with torch.enable_grad():
            fz = self.f(z_leaf, x)

        def vjp(z_columns, u_columns):
            (out,) = torch.autograd.grad(fz, z_leaf, torch.from_numpy(u_columns.T),
                                         retain_graph=True)
            return out.contiguous().numpy().T

        at = _columns(z_star)
        f_map = _implicit.PythonMap(self.dimension, lambda z: at, vjp=vjp,
                                    dtype=_dtype_name(grad.dtype))

        def run():
            result = _implicit.backward(f_map, at, _columns(grad),
                                        forward_summary=forward_summary,
                                        **self.backward_options)
            return result, result.summary

        # A failed sample's adjoint column is zero (skip: it adds nothing to the
        # gradients of x and of f's parameters) or NaN (nan).
        result = _backward_pass(self, run)
        return torch.from_numpy(np.ascontiguousarray(result.adjoint.T))


class _EnergyEquilibrium(torch.autograd.Function):
    """z* of a C++ energy's map, with the C++ IFT backward for its parameters."""

    @staticmethod
    def forward(ctx, module, z0, *parameters):
        z_star = module._solve(z0, parameters)
        ctx.module = module
        ctx.forward_summary = module.last_forward_summary
        ctx.save_for_backward(z_star)
        return z_star

    @staticmethod
    def backward(ctx, grad):
        (z_star,) = ctx.saved_tensors
        module = ctx.module

        def run():
            result = _implicit.backward(module.map, _columns(z_star), _columns(grad),
                                        forward_summary=ctx.forward_summary,
                                        **module.backward_options)
            return result, result.summary

        # The C++ pass applies on_failure: the parameter gradient is NaN (nan) or
        # the sum over the other samples (skip) when a sample failed.
        flat = _backward_pass(module, run).parameter_gradient
        # The equilibrium is locally constant in its starting point (None: zero).
        return (None, None, *_split_parameters(flat, module.energy.parameters))


class EnergyEquilibrium(torch.nn.Module):
    """Any implicit.Energy as an nn.Module: states z0 (batch, n) -> the equilibria
    z* reached from them by the C++ solver on `map` (default implicit.CccpMap(energy);
    any map built from this energy, e.g. GradientStepMap, EnergyTransformerMap).

    Every parameter block of the energy (energy.parameters: "beta", "X", "W", "W_K",
    ...) is an nn.Parameter of the same name; forward copies their values into the
    C++ energy, and backward takes their gradients from the C++ implicit backward
    pass. Parameter gradients are sums over the batch. A sample whose forward
    (with require_converged_forward, a backward_options key, default True) or
    adjoint solve failed is handled by on_failure: "raise" (default;
    ConvergenceError), "skip" (the sum over the other samples; warns) or "nan"
    (NaN parameter gradients). See last_forward_summary / last_backward_summary.
    """

    def __init__(self, energy, map=None, solver="anderson", solver_options=None,
                 backward="implicit", backward_options=None, on_failure="raise"):
        super().__init__()
        if not isinstance(energy, _implicit.Energy):
            raise TypeError("energy: expected an implicit.Energy")
        self.energy = energy
        self.map = _implicit.CccpMap(energy) if map is None else map
        if self.map.energy is not energy:
            raise ValueError("map: must be built from this energy")
        self.solver = _implicit.Solver(solver, solver_options)
        self.backward_options = _backward_keywords(backward_options, on_failure,
                                                   method=("backward", backward))
        self.on_failure = on_failure
        self._names = list(energy.parameters)
        for name, view in energy.parameters.items():
            self.register_parameter(name, torch.nn.Parameter(torch.from_numpy(view.copy())))
        self.last_forward_summary = None
        self.last_backward_summary = None

    def _solve(self, z0, parameters):
        views = self.energy.parameters
        for name, tensor in zip(self._names, parameters):
            views[name][...] = tensor.detach().numpy()
        state = _columns(z0.detach().clone())
        self.last_forward_summary = self.solver.solve(self.map, state)
        _check_forward(self, self.last_forward_summary)
        return torch.from_numpy(state.T.copy())

    def forward(self, z0):
        if z0.dim() != 2 or z0.shape[1] != self.energy.dimension:
            raise ValueError(f"z0: expected shape (batch, {self.energy.dimension}), got "
                             f"{tuple(z0.shape)}")
        if _dtype_name(z0.dtype) != self.energy.dtype:
            raise TypeError(f"z0: expected dtype {self.energy.dtype}, got {z0.dtype}")
        parameters = [getattr(self, name) for name in self._names]
        return _EnergyEquilibrium.apply(self, z0, *parameters)


class HopfieldRetrieval(EnergyEquilibrium):
    """Modern Hopfield retrieval as an nn.Module: queries (batch, n) -> the
    equilibria z* = X softmax(beta X^T z*) reached from them, with beta and
    (learn_patterns) the stored patterns X (n, N) as nn.Parameters `beta` and `X`.
    Other keywords (solver, ..., on_failure) are EnergyEquilibrium's.
    """

    def __init__(self, patterns, beta=1.0, learn_patterns=False, learn_beta=True, **options):
        patterns = torch.as_tensor(patterns)
        energy = _implicit.ModernHopfieldEnergy(
            patterns.detach().numpy(), beta=float(beta), learn_patterns=learn_patterns,
            learn_beta=learn_beta, dtype=_dtype_name(patterns.dtype))
        super().__init__(energy, **options)


class _HopfieldAttention(torch.autograd.Function):
    """Z = HopfieldLayer(R, Y) in C++, gradients from its C++ backward."""

    @staticmethod
    def forward(ctx, module, queries, patterns, mask, *parameters):
        z = module._forward(queries, patterns, mask, parameters)
        ctx.module, ctx.mask, ctx.token = module, mask, module._token
        ctx.save_for_backward(queries, patterns, *parameters)
        return z

    @staticmethod
    def backward(ctx, grad):
        module = ctx.module
        queries, patterns, *parameters = ctx.saved_tensors
        if module._token != ctx.token:      # another forward ran since: restore this one's state
            module._forward(queries, patterns, ctx.mask, parameters)

        def run():
            g = module.layer.backward(_columns(grad))
            failed = [b for b, status in enumerate(g.adjoint_summary.sample_status)
                      if status != "converged"]
            if failed and module.on_failure == "skip":
                # The C++ pass dropped the failed queries' implicit (IFT) part; their
                # explicit readout still contributed: drop their output gradients too.
                kept = grad.clone()
                kept[failed] = 0
                return module.layer.backward(_columns(kept)), g.adjoint_summary
            return g, g.adjoint_summary

        g = _backward_pass(module, run)
        converged = g.ok and (module.one_step or module.layer.summary.is_converged())
        flat = g.parameters
        d_queries = torch.from_numpy(np.ascontiguousarray(g.queries.T))
        d_patterns = torch.from_numpy(np.ascontiguousarray(g.stored_patterns.T))
        if not converged and module.on_failure == "nan":   # never a silently wrong gradient
            flat = np.full_like(flat, np.nan)
            d_queries.fill_(float("nan"))
            d_patterns.fill_(float("nan"))
        return (None, d_queries, d_patterns, None,
                *_split_parameters(flat, module.layer.parameters))


class HopfieldLayer(torch.nn.Module):
    """Multi-head Hopfield attention (implicit.HopfieldLayer) as an nn.Module:
    queries (S, query_dim) and stored patterns (N, pattern_dim) -> (S, output_dim).

    Retrieval to the equilibrium of the layer's energy by a C++ solver (solver,
    solver_options; default Picard), backward by the C++ implicit function theorem
    (backward_options: implicit.backward's keywords); one_step=True is exactly
    multi-head softmax attention. The projections W_Q, W_K, W_V, W_O and beta are
    nn.Parameters. Other keywords are implicit.HopfieldLayer's (num_heads, head_dim,
    value_dim, output_dim, project_*, beta, beta_per_head, learn_beta,
    query_weight, seed). With query_weight = 0 a converged retrieval does not
    depend on the queries except through their basin, so their gradient is zero.
    A query whose retrieval or adjoint solve did not converge is handled by
    on_failure: "raise" (default; ConvergenceError), "skip" (it contributes zero
    gradient; warns) or "nan" (every gradient NaN).
    """

    def __init__(self, query_dim, pattern_dim, solver=None, solver_options=None,
                 backward_options=None, dtype=torch.float64, on_failure="raise",
                 **layer_options):
        super().__init__()
        self.one_step = bool(layer_options.get("one_step", False))
        cpp_solver = None
        if solver is not None or solver_options is not None:
            cpp_solver = _implicit.Solver(solver or "picard", solver_options)
        self.backward_options = _backward_keywords(backward_options, on_failure)
        self.on_failure = on_failure
        self.layer = _implicit.HopfieldLayer(query_dim, pattern_dim, solver=cpp_solver,
                                             backward=self.backward_options,
                                             dtype=_dtype_name(dtype), **layer_options)
        self._names = list(self.layer.parameters)
        for name, view in self.layer.parameters.items():
            self.register_parameter(name, torch.nn.Parameter(torch.from_numpy(view.copy())))
        self._token = 0
        self.last_backward_summary = None

    def _forward(self, queries, patterns, mask, parameters):
        views = self.layer.parameters
        for name, tensor in zip(self._names, parameters):
            views[name][...] = tensor.detach().numpy()
        self._token += 1
        z = self.layer.forward(_columns(queries), _columns(patterns),
                               None if mask is None else np.asfortranarray(mask))
        _check_forward(self, self.layer.summary)
        return torch.from_numpy(np.ascontiguousarray(z.T))

    @property
    def last_forward_summary(self):
        return self.layer.summary

    def forward(self, queries, patterns, mask=None):
        """mask: additive score mask (N,) or (N, S) of 0 / -inf entries, or None."""
        if mask is not None:
            mask = torch.as_tensor(mask, dtype=queries.dtype).detach().numpy()
            mask = mask.reshape(-1, 1) if mask.ndim == 1 else mask
        parameters = [getattr(self, name) for name in self._names]
        return _HopfieldAttention.apply(self, queries, patterns, mask, *parameters)
