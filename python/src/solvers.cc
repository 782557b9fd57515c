// Solvers by name, their Summary, and solve() with the GIL released.
#include "handles.h"

#include <implicit/core/mpi.h>
#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/petsc.h>
#include <implicit/solvers/registry.h>
#include <implicit/solvers/sharded_solve.h>
#include <implicit/solvers/solver.h>

#include <pybind11/stl.h>

#include <map>
#include <string>

namespace implicit::python {
namespace {


// Python option values as the registry's strings: bool, int, float or str.
std::string OptionText(const std::string& key, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(value)) return std::string(py::str(value));
  if (py::isinstance<py::float_>(value)) return std::string(py::repr(value));
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  // numpy scalars (np.int64(5), np.bool_(True)) through their Python value
  if (py::isinstance(value, py::module_::import("numpy").attr("generic"))) {
    return OptionText(key, value.attr("item")());
  }
  throw py::type_error("option '" + key + "': expected a bool, int, float or str, got " + TypeName(value));
}

PySolver MakePySolver(const std::string& name, const py::object& options,
                      const py::kwargs& kwargs) {
  PySolver solver;
  solver.name = name;
  auto add = [&solver](const py::handle& key, const py::handle& value) {
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error("options: keys must be strings, got " +
                           std::string(py::str(py::repr(key))));
    }
    const std::string k = key.cast<std::string>();
    if (k == "callback") {
      if (!value.is_none() && !PyCallable_Check(value.ptr())) {
        throw py::type_error("callback: expected a callable or None");
      }
      solver.callback = py::reinterpret_borrow<py::object>(value);
      return;
    }
    if (solver.options.count(k) != 0) {
      throw py::value_error("option '" + k + "' given twice (in options and as a keyword)");
    }
    solver.options[k] = OptionText(k, value);
  };
  if (!options.is_none()) {
    if (!py::isinstance<py::dict>(options)) {
      throw py::type_error("options: expected a dict or None");
    }
    for (auto item : py::reinterpret_borrow<py::dict>(options)) add(item.first, item.second);
  }
  for (auto item : kwargs) add(item.first, item.second);
  // Validates name, keys and values now (std::invalid_argument -> ValueError).
  MakeSolver<double>(solver.name, solver.options);
  return solver;
}

// The processes of this run: MPI_COMM_WORLD under mpirun (in a build with
// MPI), else this process alone.
const Communicator& Processes() {
  return mpi::LaunchedByMpirun() && mpi::Available() ? mpi::World() : SingleProcess();
}

// solve(), or with sharded = true ShardedSolve over Processes().
Summary Solve(const PySolver& solver, const MapHandle& map, const py::object& z, bool sharded) {
  return Dispatch(map.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const FixedPointMap<Scalar>& f = map.get<Scalar>();
    auto state = WritableView<Scalar>(z, "z", f.dimension(), -1);
    PendingError callback_errors;
    SolverOptions base;
    // Runs after every iteration: stops the solve (at its best state so far)
    // on Ctrl-C, on an exception in a Python map or in the user's callback,
    // or when the user's callback returns True.
    base.callback = [&](const IterationSummary& it) {
      py::gil_scoped_acquire gil;
      if (map.errors && map.errors->pending()) return CallbackReturnType::kAbort;
      if (PyErr_CheckSignals() != 0) {
        callback_errors.Store(py::error_already_set());
        return CallbackReturnType::kAbort;
      }
      if (solver.callback.is_none()) return CallbackReturnType::kContinue;
      try {
        const bool stop = py::bool_(solver.callback(it));
        return stop ? CallbackReturnType::kAbort : CallbackReturnType::kContinue;
      } catch (py::error_already_set& e) {
        callback_errors.Store(std::move(e));
        return CallbackReturnType::kAbort;
      }
    };
    std::unique_ptr<Solver<Scalar>> s = solver.Build<Scalar>(base);
    if (sharded && !f.SupportsSubsets()) {
      throw py::value_error("solve(sharded=True): the map has per-sample data (it does not support "
                            "subsets of the batch), so it cannot be split over processes");
    }
    Summary summary;
    {
      py::gil_scoped_release release;
      summary = sharded ? ShardedSolve(*s, f, state, Processes()) : s->Solve(f, state);
    }
    map.RaisePendingError(py::cast(summary));
    callback_errors.RaiseIfPending(py::cast(summary));
    return summary;
  });
}

py::dict Trace(const Summary& s) {
  std::vector<int> iteration, evaluations;
  std::vector<double> seconds, max_residual, mean_residual;
  for (const TraceEntry& e : s.trace) {
    iteration.push_back(e.iteration);
    evaluations.push_back(e.function_evaluations);
    seconds.push_back(e.seconds);
    max_residual.push_back(e.max_residual);
    mean_residual.push_back(e.mean_residual);
  }
  py::dict d;
  d["iteration"] = ToArray(iteration);
  d["function_evaluations"] = ToArray(evaluations);
  d["seconds"] = ToArray(seconds);
  d["max_residual"] = ToArray(max_residual);
  d["mean_residual"] = ToArray(mean_residual);
  return d;
}


}  // namespace

void BindSolvers(py::module_& m) {
  py::class_<IterationSummary>(m, "IterationSummary",
                               "What an iteration callback receives after every iteration.")
      .def_readonly("iteration", &IterationSummary::iteration)
      .def_readonly("function_evaluations", &IterationSummary::function_evaluations)
      .def_readonly("max_residual", &IterationSummary::max_residual)
      .def_readonly("num_converged", &IterationSummary::num_converged)
      .def_readonly("num_active", &IterationSummary::num_active)
      .def_readonly("seconds", &IterationSummary::seconds)
      .def("__repr__", [](const IterationSummary& it) {
        return "<IterationSummary iteration " + std::to_string(it.iteration) + ", " +
               std::to_string(it.num_converged) + " converged, max residual " +
               std::to_string(it.max_residual) + ">";
      });

  py::class_<Summary>(m, "Summary",
                      "The outcome of a forward solve, overall and per sample (C++ Summary).")
      .def_readonly("solver", &Summary::solver)
      .def_property_readonly("termination_type",
                             [](const Summary& s) {
                               return TerminationTypeToString(s.termination_type);
                             })
      .def_readonly("message", &Summary::message)
      .def_readonly("iterations", &Summary::iterations)
      .def_readonly("function_evaluations", &Summary::function_evaluations)
      .def_readonly("jacobian_products", &Summary::jacobian_products)
      .def_readonly("absolute_residual", &Summary::absolute_residual)
      .def_readonly("relative_residual", &Summary::relative_residual)
      .def_property_readonly("sample_status",
                             [](const Summary& s) { return StatusNames(s.sample_status); })
      .def_property_readonly("sample_residual",
                             [](const Summary& s) { return ToArray(s.sample_residual); })
      .def_property_readonly("sample_iterations",
                             [](const Summary& s) { return ToArray(s.sample_iterations); })
      .def_property_readonly("sample_evaluations",
                             [](const Summary& s) { return ToArray(s.sample_evaluations); })
      .def_property_readonly("sample_accelerated_steps",
                             [](const Summary& s) { return ToArray(s.sample_accelerated_steps); })
      .def_property_readonly("sample_backtracks",
                             [](const Summary& s) { return ToArray(s.sample_backtracks); })
      .def_property_readonly("sample_fallbacks",
                             [](const Summary& s) { return ToArray(s.sample_fallbacks); })
      .def_property_readonly("trace", &Trace,
                             "dict of arrays, one entry per iteration (record_trace=True)")
      .def_readonly("wall_time_seconds", &Summary::wall_time_seconds)
      .def_property_readonly("num_samples", &Summary::num_samples)
      .def_property_readonly("num_converged", &Summary::num_converged)
      .def_property_readonly("total_sample_evaluations", &Summary::total_sample_evaluations)
      .def("is_converged", &Summary::IsConverged)
      .def("brief_report", &Summary::BriefReport)
      .def("full_report", &Summary::FullReport)
      .def("__repr__", [](const Summary& s) { return "<Summary " + s.BriefReport() + ">"; });

  py::class_<PySolver>(m, "Solver", R"(A forward solver chosen by name.

Solver(name, options=None, **kwargs): options as a dict and/or keyword
arguments, keyed by the C++ Options field names (implicit.solver_option_names);
values are bool, int, float or str. callback=f calls f(IterationSummary) after
every iteration; a truthy return stops the solve (status "user_abort").
Unknown names, keys or bad values raise ValueError listing what is valid.)")
      .def(py::init(&MakePySolver), py::arg("name"), py::arg("options") = py::none())
      .def_readonly("name", &PySolver::name)
      .def_property_readonly("options", [](const PySolver& s) { return s.options; })
      .def("solve", &Solve, py::arg("map"), py::arg("z"), py::kw_only(), py::arg("sharded") = false,
           R"(Solves z = map(z) per column.

z (dimension x batch, Fortran order, the map's dtype) holds the initial
guesses and is overwritten with the result, without a copy. Returns a Summary.
The GIL is released while C++ iterates. Ctrl-C (or an exception in a Python
map or the callback) stops the solve with every sample at its best state so
far in z, then raises the exception with the Summary as its attribute
'summary'.

sharded=True (under `mpirun -np K python3 ...`, every process calling it with
the same batch): each process solves its share of the columns and all of them
end with the whole solved batch in z and the merged Summary, as one process
would (C++ ShardedSolve). Started without mpirun it is the plain solve. The map
must be the same function for every sample (no per-sample data).)")
      .def("__repr__", [](const PySolver& s) { return "<Solver " + s.name + ">"; });

  // The KINSOL and PETSc backends this build has join the registry with the module.
  kinsol::RegisterSolvers();
  petsc::RegisterSolvers();
  m.def("solver_names", &SolverNames,
        "The registered solver names: libimplicit's, then the KINSOL (kinsol-*) and PETSc (petsc-*)\n"
        "backends this build has.");
  m.def("solver_library", &SolverLibrary, py::arg("name"),
        "Who implements the solver: 'libimplicit', 'SUNDIALS KINSOL <version>' or 'PETSc <version>'.");
  m.def("mpi_available", [] { return mpi::Available(); },
        "Whether this build has MPI (then solve(sharded=True) under mpirun splits the batch).");
  m.def("process_rank", [] { return Processes().rank(); },
        "This process's rank in the run (0 without mpirun).");
  m.def("process_count", [] { return Processes().size(); },
        "The number of processes of the run (mpirun -np K; 1 without mpirun).");
  m.def("solver_option_names", &SolverOptionNames, py::arg("name"),
        "The option keys the solver accepts (shared ones first).");
  m.def("solver_needs_energy", &SolverNeedsEnergy, py::arg("name"));
  m.def("solver_needs_jacobian_products", &SolverNeedsJacobianProducts, py::arg("name"));
}

}  // namespace implicit::python
