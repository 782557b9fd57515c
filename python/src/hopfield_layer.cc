// HopfieldLayer from Python: multi-head Hopfield attention with learned
// projections, forward by retrieval (or one step), backward by the IFT.
#include "handles.h"

#include <implicit/layers/hopfield_layer.h>

#include <pybind11/stl.h>

#include <string>

namespace implicit::python {
namespace {

using PyHopfieldLayer = Typed<HopfieldLayer>;

struct PyHopfieldGradients {
  py::object parameters, queries, stored_patterns;
  LinearSolveSummary adjoint_summary;
};

std::shared_ptr<PyHopfieldLayer> MakeLayer(
    Index query_dim, Index pattern_dim, Index num_heads, Index head_dim, Index value_dim,
    Index output_dim, bool project_queries, bool project_keys, bool project_values,
    bool project_output, double beta, bool beta_per_head, bool learn_beta,
    double query_weight, bool one_step, unsigned seed, const py::object& solver,
    const py::object& backward, const py::object& dtype) {
  auto handle = std::make_shared<PyHopfieldLayer>();
  handle->dtype = ParseDtype(dtype, "dtype");
  if (!solver.is_none() && !py::isinstance<PySolver>(solver)) {
    throw py::type_error("solver: expected an implicit.Solver or None");
  }
  if (!backward.is_none() && !py::isinstance<py::dict>(backward)) {
    throw py::type_error("backward: expected a dict of implicit.backward's keywords or None");
  }
  Dispatch(handle->dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    HopfieldLayerOptions<Scalar> o;
    o.query_dim = query_dim;
    o.pattern_dim = pattern_dim;
    o.num_heads = num_heads;
    o.head_dim = head_dim;
    o.value_dim = value_dim;
    o.output_dim = output_dim;
    o.project_queries = project_queries;
    o.project_keys = project_keys;
    o.project_values = project_values;
    o.project_output = project_output;
    o.beta = beta;
    o.beta_per_head = beta_per_head;
    o.learn_beta = learn_beta;
    o.query_weight = query_weight;
    o.one_step = one_step;
    o.seed = seed;
    if (!solver.is_none()) o.solver = solver.cast<const PySolver&>().Build<Scalar>();
    if (!backward.is_none()) o.backward = ParseBackwardOptions(backward.cast<py::dict>());
    handle->set<Scalar>(std::make_shared<HopfieldLayer<Scalar>>(o));
  });
  return handle;
}

py::array LayerForward(const PyHopfieldLayer& h, const py::object& queries,
                  const py::object& patterns, const py::object& mask) {
  return Dispatch(h.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    HopfieldLayer<Scalar>& layer = h.get<Scalar>();
    auto R = View<Scalar>(queries, "queries", layer.options().query_dim, -1);
    auto Y = View<Scalar>(patterns, "patterns", layer.options().pattern_dim, -1);
    Matrix<Scalar> m;
    if (!mask.is_none()) m = View<Scalar>(mask, "mask", Y.cols(), -1);
    Matrix<Scalar> Z;
    {
      py::gil_scoped_release release;
      Z = layer.Forward(R, Y, m);
    }
    return MatrixToArray<Scalar>(Z);
  });
}

PyHopfieldGradients LayerBackward(const PyHopfieldLayer& h, const py::object& grad) {
  return Dispatch(h.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    HopfieldLayer<Scalar>& layer = h.get<Scalar>();
    if (layer.state().cols() == 0) {
      throw std::logic_error("HopfieldLayer.backward: call forward first");
    }
    auto g = View<Scalar>(grad, "grad", layer.output_dim(), layer.state().cols());
    HopfieldGradients<Scalar> r;
    {
      py::gil_scoped_release release;
      r = layer.Backward(g);
    }
    PyHopfieldGradients out;
    out.parameters = VectorToArray<Scalar>(r.parameters);
    out.queries = MatrixToArray<Scalar>(r.queries);
    out.stored_patterns = MatrixToArray<Scalar>(r.stored_patterns);
    out.adjoint_summary = std::move(r.adjoint_summary);
    return out;
  });
}

// Writable views of the layer's parameter blocks, kept alive by the layer.
py::dict LayerParameters(const py::object& self) {
  const PyHopfieldLayer& h = self.cast<const PyHopfieldLayer&>();
  return Dispatch(h.dtype, [&](auto scalar) {
    return ParameterViews(&h.get<decltype(scalar)>().parameters(), self);
  });
}

}  // namespace

void BindHopfieldLayer(py::module_& m) {
  py::class_<PyHopfieldGradients>(m, "HopfieldGradients",
                                  "Gradients of HopfieldLayer.backward for the last forward.")
      .def_readonly("parameters", &PyHopfieldGradients::parameters,
                    "dL/dtheta, 1-D, in the order of layer.parameters")
      .def_readonly("queries", &PyHopfieldGradients::queries, "dL/dR (query_dim x S)")
      .def_readonly("stored_patterns", &PyHopfieldGradients::stored_patterns,
                    "dL/dY (pattern_dim x N)")
      .def_readonly("adjoint_summary", &PyHopfieldGradients::adjoint_summary)
      .def_property_readonly(
          "ok", [](const PyHopfieldGradients& g) { return g.adjoint_summary.IsConverged(); });

  py::class_<PyHopfieldLayer, std::shared_ptr<PyHopfieldLayer>>(m, "HopfieldLayer",
                                                               R"(Multi-head Hopfield attention.

Z = layer.forward(R, Y, mask=None): queries R (query_dim x S, one per column),
stored patterns Y (pattern_dim x N); Z is output_dim x S. Retrieval to the
stationary point of the layer's energy (solver=implicit.Solver(...), default
Picard) or one attention step (one_step=True: exactly multi-head softmax
attention). backward(dL/dZ) -> HopfieldGradients for the last forward, by the
implicit function theorem in retrieval mode (backward={"linear_solver": ...}).
With query_weight = 0 a converged retrieval does not depend on R except through
its basin: dL/dR and dL/dW_Q are zero then (use query_weight > 0 or one_step).)")
      .def(py::init(&MakeLayer), py::arg("query_dim"), py::arg("pattern_dim"),
           py::arg("num_heads") = 1, py::arg("head_dim") = 0, py::arg("value_dim") = 0,
           py::arg("output_dim") = 0, py::arg("project_queries") = true,
           py::arg("project_keys") = true, py::arg("project_values") = true,
           py::arg("project_output") = true, py::arg("beta") = 0.0,
           py::arg("beta_per_head") = false, py::arg("learn_beta") = true,
           py::arg("query_weight") = 0.0, py::arg("one_step") = false, py::arg("seed") = 1u,
           py::arg("solver") = py::none(), py::arg("backward") = py::none(),
           py::arg("dtype") = "float64")
      .def_property_readonly("dtype", [](const PyHopfieldLayer& h) { return DtypeName(h.dtype); })
      .def_property_readonly("output_dim",
                             [](const PyHopfieldLayer& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.get<decltype(s)>().output_dim();
                               });
                             })
      .def_property_readonly("parameters", &LayerParameters,
                             "dict name -> writable view of each parameter block (no copy)")
      .def_property_readonly("summary",
                             [](const PyHopfieldLayer& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.get<decltype(s)>().summary();
                               });
                             },
                             "the Summary of the last retrieval")
      .def("forward", &LayerForward, py::arg("queries"), py::arg("patterns"),
           py::arg("mask") = py::none())
      .def("backward", &LayerBackward, py::arg("grad"));
}

}  // namespace implicit::python
