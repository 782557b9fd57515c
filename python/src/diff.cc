// Implicit differentiation from Python: implicit.backward (ImplicitBackward).
#include "handles.h"

#include <implicit/diff/implicit_diff.h>

#include <pybind11/stl.h>

#include <string>

namespace implicit::python {
namespace {

struct PyBackwardResult {
  LinearSolveSummary summary;
  py::object adjoint, parameter_gradient, input_gradient;
};

PyBackwardResult Backward(const MapHandle& map, const py::object& z_star,
                          const py::object& grad_z, const std::string& method,
                          const std::string& linear_solver, double tolerance,
                          double absolute_tolerance, int max_iterations, int restart, int memory,
                          double regularization, double divergence_threshold, int phantom_steps,
                          double phantom_damping, bool drop_failed_samples) {
  BackwardOptions options;
  if (!StringToGradientMethod(method, &options.method)) {
    throw py::value_error("method: '" + method +
                          "' is unknown (implicit, jacobian_free, phantom)");
  }
  options.linear_solver = linear_solver;
  options.tolerance = tolerance;
  options.absolute_tolerance = absolute_tolerance;
  options.max_iterations = max_iterations;
  options.restart = restart;
  options.memory = memory;
  options.regularization = regularization;
  options.divergence_threshold = divergence_threshold;
  options.phantom_steps = phantom_steps;
  options.phantom_damping = phantom_damping;
  options.drop_failed_samples = drop_failed_samples;
  return Dispatch(map.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const FixedPointMap<Scalar>& f = map.get<Scalar>();
    auto z = View<Scalar>(z_star, "z_star", f.dimension(), -1);
    auto g = View<Scalar>(grad_z, "grad_z", f.dimension(), z.cols());
    BackwardResult<Scalar> result;
    {
      py::gil_scoped_release release;
      result = ImplicitBackward<Scalar>(f, z, g, options);
    }
    map.RaisePendingError();
    PyBackwardResult out;
    out.summary = std::move(result.summary);
    out.adjoint = MatrixToArray<Scalar>(result.adjoint);
    out.parameter_gradient = VectorToArray<Scalar>(result.parameter_gradient);
    out.input_gradient = MatrixToArray<Scalar>(result.input_gradient);
    return out;
  });
}


}  // namespace

void BindDifferentiation(py::module_& m) {
  py::class_<LinearSolveSummary>(m, "LinearSolveSummary",
                                 "The outcome of the adjoint linear solve, per sample.")
      .def_readonly("solver", &LinearSolveSummary::solver)
      .def_property_readonly("termination_type",
                             [](const LinearSolveSummary& s) {
                               return TerminationTypeToString(s.termination_type);
                             })
      .def_readonly("message", &LinearSolveSummary::message)
      .def_readonly("iterations", &LinearSolveSummary::iterations)
      .def_readonly("jacobian_products", &LinearSolveSummary::jacobian_products)
      .def_readonly("relative_residual", &LinearSolveSummary::relative_residual)
      .def_readonly("absolute_residual", &LinearSolveSummary::absolute_residual)
      .def_property_readonly(
          "sample_status", [](const LinearSolveSummary& s) { return StatusNames(s.sample_status); })
      .def_property_readonly("sample_residual",
                             [](const LinearSolveSummary& s) { return ToArray(s.sample_residual); })
      .def_property_readonly(
          "sample_relative_residual",
          [](const LinearSolveSummary& s) { return ToArray(s.sample_relative_residual); })
      .def_property_readonly(
          "sample_iterations",
          [](const LinearSolveSummary& s) { return ToArray(s.sample_iterations); })
      .def_readonly("wall_time_seconds", &LinearSolveSummary::wall_time_seconds)
      .def_property_readonly("num_samples", &LinearSolveSummary::num_samples)
      .def_property_readonly("num_converged", &LinearSolveSummary::num_converged)
      .def("is_converged", &LinearSolveSummary::IsConverged)
      .def("brief_report", &LinearSolveSummary::BriefReport)
      .def("__repr__", [](const LinearSolveSummary& s) {
        return "<LinearSolveSummary " + s.BriefReport() + ">";
      });

  py::class_<PyBackwardResult>(m, "BackwardResult", R"(Gradients through an equilibrium.

adjoint: u (dimension x batch); parameter_gradient: dL/dtheta (1-D, the layout of
the energy's parameter_vector; empty without parameters); input_gradient: dL/dx
(empty without an input); summary: the adjoint solve; ok: every sample's adjoint
converged. A failed sample's gradients are NaN, never zero.)")
      .def_readonly("summary", &PyBackwardResult::summary)
      .def_readonly("adjoint", &PyBackwardResult::adjoint)
      .def_readonly("parameter_gradient", &PyBackwardResult::parameter_gradient)
      .def_readonly("input_gradient", &PyBackwardResult::input_gradient)
      .def_property_readonly("ok",
                             [](const PyBackwardResult& r) { return r.summary.IsConverged(); })
      .def("__repr__", [](const PyBackwardResult& r) {
        return "<BackwardResult " + r.summary.BriefReport() + ">";
      });

  const BackwardOptions defaults;
  m.def("backward", &Backward, py::arg("map"), py::arg("z_star"), py::arg("grad_z"),
        py::arg("method") = "implicit", py::arg("linear_solver") = defaults.linear_solver,
        py::arg("tolerance") = defaults.tolerance,
        py::arg("absolute_tolerance") = defaults.absolute_tolerance,
        py::arg("max_iterations") = defaults.max_iterations, py::arg("restart") = defaults.restart,
        py::arg("memory") = defaults.memory, py::arg("regularization") = defaults.regularization,
        py::arg("divergence_threshold") = defaults.divergence_threshold,
        py::arg("phantom_steps") = defaults.phantom_steps,
        py::arg("phantom_damping") = defaults.phantom_damping,
        py::arg("drop_failed_samples") = defaults.drop_failed_samples,
        R"(The implicit-function-theorem backward pass at an equilibrium z_star.

Solves (I - J)^T u = grad_z (grad_z = dL/dz*, dimension x batch) with the chosen
linear solver ("auto": minres for maps from an energy, else gmres; also
"fixed_point", "anderson", "broyden", "cg", "gmres", "direct") and returns a
BackwardResult. method: "implicit" (exact), "jacobian_free", "phantom".
Bad options raise ValueError.)");
}

}  // namespace implicit::python
