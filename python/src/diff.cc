// Implicit differentiation from Python: implicit.backward (ImplicitBackward).
#include "handles.h"

#include <implicit/diff/implicit_diff.h>

#include <pybind11/stl.h>

#include <string>

namespace implicit::python {

const char* const kBackwardOptionNames =
    "method, linear_solver, tolerance, absolute_tolerance, max_iterations, restart, memory, "
    "regularization, divergence_threshold, phantom_steps, phantom_damping, failed_samples, "
    "require_converged_forward, drop_failed_samples";

namespace {

struct PyBackwardResult {
  LinearSolveSummary summary;
  py::object adjoint, parameter_gradient, input_gradient;
};

PyBackwardResult Backward(const MapHandle& map, const py::object& z_star,
                          const py::object& grad_z, const py::object& forward_summary,
                          const py::kwargs& keywords) {
  const BackwardOptions options = ParseBackwardOptions(keywords);
  if (!forward_summary.is_none() && !py::isinstance<Summary>(forward_summary)) {
    throw py::type_error("forward_summary: expected an implicit.Summary or None");
  }
  const Summary* forward =
      forward_summary.is_none() ? nullptr : &forward_summary.cast<const Summary&>();
  return Dispatch(map.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const FixedPointMap<Scalar>& f = map.get<Scalar>();
    auto z = View<Scalar>(z_star, "z_star", f.dimension(), -1);
    auto g = View<Scalar>(grad_z, "grad_z", f.dimension(), z.cols());
    BackwardResult<Scalar> result;
    try {
      py::gil_scoped_release release;
      result = forward != nullptr ? ImplicitBackward<Scalar>(f, z, g, *forward, options)
                                  : ImplicitBackward<Scalar>(f, z, g, options);
    } catch (const ConvergenceError&) {
      map.RaisePendingError();  // a Python map's own exception is the cause: raise it instead
      throw;
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


// The option `key`'s value as T, or TypeError naming the key and the type it takes.
template <typename T>
T OptionValue(const std::string& key, py::handle value, const char* expected) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(key + ": expected " + expected + ", got " + TypeName(value));
  }
}

}  // namespace

BackwardOptions ParseBackwardOptions(const py::dict& keywords) {
  BackwardOptions o;
  for (auto item : keywords) {
    const std::string key = py::str(item.first);
    const py::handle v = item.second;
    if (key == "method") {
      const std::string method = OptionValue<std::string>(key, v, "a str");
      if (!StringToGradientMethod(method, &o.method)) {
        throw py::value_error("method: '" + method +
                              "' is unknown (implicit, jacobian_free, phantom)");
      }
    } else if (key == "linear_solver") {
      o.linear_solver = OptionValue<std::string>(key, v, "a str");
    } else if (key == "tolerance") {
      o.tolerance = OptionValue<double>(key, v, "a float");
    } else if (key == "absolute_tolerance") {
      o.absolute_tolerance = OptionValue<double>(key, v, "a float");
    } else if (key == "max_iterations") {
      o.max_iterations = OptionValue<int>(key, v, "an int (32-bit)");
    } else if (key == "restart") {
      o.restart = OptionValue<int>(key, v, "an int (32-bit)");
    } else if (key == "memory") {
      o.memory = OptionValue<int>(key, v, "an int (32-bit)");
    } else if (key == "regularization") {
      o.regularization = OptionValue<double>(key, v, "a float");
    } else if (key == "divergence_threshold") {
      o.divergence_threshold = OptionValue<double>(key, v, "a float");
    } else if (key == "phantom_steps") {
      o.phantom_steps = OptionValue<int>(key, v, "an int (32-bit)");
    } else if (key == "phantom_damping") {
      o.phantom_damping = OptionValue<double>(key, v, "a float");
    } else if (key == "failed_samples") {
      const std::string policy = OptionValue<std::string>(key, v, "a str");
      if (!StringToFailedSamplePolicy(policy, &o.failed_samples)) {
        throw py::value_error("failed_samples: '" + policy +
                              "' is unknown (nan, skip, throw)");
      }
    } else if (key == "drop_failed_samples") {
      o.drop_failed_samples = OptionValue<bool>(key, v, "a bool");
    } else if (key == "require_converged_forward") {
      o.require_converged_forward = OptionValue<bool>(key, v, "a bool");
    } else {
      throw py::value_error("unknown backward option '" + key + "' (" + kBackwardOptionNames +
                            ")");
    }
  }
  std::string error;
  if (!o.IsValid(&error)) throw py::value_error(error);
  return o;
}

void BindDifferentiation(py::module_& m) {
  // C++ ConvergenceError -> implicit.ConvergenceError (a RuntimeError) with the
  // backward summary as attribute `summary`. The type lives as long as the
  // process (a leaked reference: no destructor runs after the interpreter).
  static py::handle convergence_error =
      py::exception<ConvergenceError>(m, "ConvergenceError", PyExc_RuntimeError).release();
  convergence_error.attr("__module__") = "implicit";  // as the package re-exports it
  convergence_error.attr("__doc__") =
      "A solve did not converge for some samples (on_failure='raise' / failed_samples='throw'). "
      "`summary`: the Summary (forward) or LinearSolveSummary (backward) that says which and why.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConvergenceError& e) {
      py::object error = convergence_error(e.what());
      error.attr("summary") = py::cast(e.summary);
      PyErr_SetObject(convergence_error.ptr(), error.ptr());
    }
  });

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

  m.def("backward", &Backward, py::arg("map"), py::arg("z_star"), py::arg("grad_z"),
        py::arg("forward_summary") = py::none(),
        R"(The implicit-function-theorem backward pass at an equilibrium z_star.

Solves (I - J)^T u = grad_z (grad_z = dL/dz*, dimension x batch) and returns a
BackwardResult. forward_summary: the Summary of the solve that produced z_star;
with require_converged_forward its unconverged samples are failed samples too.
Keywords (C++ BackwardOptions; defaults in brackets):
method ["implicit"; "jacobian_free", "phantom"], linear_solver ["auto": minres
for maps from an energy, else gmres; "fixed_point", "anderson", "broyden", "cg",
"minres", "gmres", "direct"], tolerance [1e-10, relative], absolute_tolerance
[0], max_iterations [200], restart [30, gmres], memory [5, anderson/broyden],
regularization [1e-12], divergence_threshold [1e8], phantom_steps [5],
phantom_damping [0.5], failed_samples ["nan": a failed sample's gradients and
the parameter gradient are NaN; "skip": it contributes zero, the parameter
gradient sums the others; "throw": raise implicit.ConvergenceError with
.summary], require_converged_forward [True; with forward_summary or in layers],
drop_failed_samples [False; deprecated: failed_samples="skip"]. Bad options
raise ValueError (an unknown key, a value out of range), or TypeError naming the
key (a value of the wrong type).)");
  m.def(
      "check_backward_options",
      [](const py::kwargs& keywords) { ParseBackwardOptions(keywords); },
      "Raises ValueError (or TypeError for a value of the wrong type), naming the key or field, "
      "when implicit.backward's keywords are not valid BackwardOptions; returns None otherwise.");
}

}  // namespace implicit::python
