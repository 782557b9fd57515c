// What a Python Energy or Map object holds: the float or the double instance
// of the C++ object (chosen by dtype at construction), and the Python objects
// it must keep alive (the energy behind a map, a Python map's callables).
#pragma once

#include "arrays.h"

#include <implicit/core/energy.h>
#include <implicit/core/map.h>
#include <implicit/core/parameters.h>
#include <implicit/diff/backward_options.h>
#include <implicit/solvers/registry.h>
#include <implicit/solvers/solver.h>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace implicit::python {

// One of T<double>, T<float>.
template <template <typename> class T>
struct Typed {
  Dtype dtype = Dtype::kFloat64;
  std::shared_ptr<T<double>> d;
  std::shared_ptr<T<float>> f;

  template <typename Scalar>
  T<Scalar>& get() const {
    if constexpr (sizeof(Scalar) == sizeof(double)) {
      return *d;
    } else {
      return *f;
    }
  }
  template <typename Scalar>
  void set(std::shared_ptr<T<Scalar>> object) {
    dtype = DtypeOf<Scalar>();
    if constexpr (sizeof(Scalar) == sizeof(double)) {
      d = std::move(object);
    } else {
      f = std::move(object);
    }
  }
};

// A Python exception raised inside a callable the C++ code called (a Python
// map, an iteration callback): kept until control is back in the binding,
// which raises it there. While one is pending, Python maps return NaN without
// calling Python again and the solve stops at its next iteration.
class PendingError {
 public:
  // Stores the Python error currently set (call with the GIL held, inside
  // catch (py::error_already_set&)). Keeps the first one.
  void Store(py::error_already_set&& error) {
    if (!error_) error_.emplace(std::move(error));
  }
  bool pending() const { return error_.has_value(); }
  // Raises the stored exception (GIL held), clearing it; attaches `summary`
  // (when given) as its attribute "summary".
  void RaiseIfPending(const py::object& summary = py::none());

 private:
  std::optional<py::error_already_set> error_;
};

struct EnergyHandle : Typed<Energy> {
  virtual ~EnergyHandle() = default;
  const char* type_name = "Energy";
};

// A built-in energy T: the Energy handle plus the typed object for T's own methods.
template <template <typename> class T>
struct BuiltinEnergy : EnergyHandle {
  Typed<T> typed;  // the same object as the base's
  template <typename Scalar>
  void Set(std::shared_ptr<T<Scalar>> energy) {
    typed.template set<Scalar>(energy);
    EnergyHandle::set<Scalar>(std::move(energy));
  }
};

// A BuiltinEnergy<T> called `type_name` holding build(Scalar()) (a
// shared_ptr<T<Scalar>>) for the scalar type of `dtype`.
template <template <typename> class T, typename Build>
std::shared_ptr<BuiltinEnergy<T>> MakeBuiltinEnergy(const char* type_name, Dtype dtype, Build&& build) {
  auto handle = std::make_shared<BuiltinEnergy<T>>();
  handle->type_name = type_name;
  Dispatch(dtype, [&](auto scalar) { handle->Set(build(scalar)); });
  return handle;
}

struct MapHandle : Typed<FixedPointMap> {
  virtual ~MapHandle() = default;
  const char* type_name = "Map";
  py::object keep_alive;                    // the energy, or the callables
  std::shared_ptr<PendingError> errors;     // Python maps only
  void RaisePendingError(const py::object& summary = py::none()) const {
    if (errors) errors->RaiseIfPending(summary);
  }
};

// implicit.Solver: a solver chosen by name with string options (the
// registry's syntax), built for the map's dtype at each solve.
struct PySolver {
  std::string name;
  std::map<std::string, std::string> options;
  py::object callback = py::none();

  template <typename Scalar>
  std::unique_ptr<Solver<Scalar>> Build(const SolverOptions& base = {}) const {
    return MakeSolver<Scalar>(name, options, base);
  }
};

// BackwardOptions from implicit.backward's keywords (ValueError naming an
// unknown key or an invalid value).
BackwardOptions ParseBackwardOptions(const py::dict& keywords);

// The names of per-sample statuses ("converged", ...), as a list.
py::list StatusNames(const std::vector<TerminationType>& status);

// Writable views of the blocks of `p` (none when p is null), each keeping
// `owner` (the Python object that owns p) alive.
template <typename Scalar>
py::dict ParameterViews(ParameterSet<Scalar>* p, const py::object& owner) {
  py::dict blocks;
  if (p == nullptr) return blocks;
  for (const auto& entry : p->entries()) {
    const py::ssize_t s = sizeof(Scalar);
    blocks[py::str(entry.name)] = py::array(
        py::dtype::of<Scalar>(), {py::ssize_t(entry.rows), py::ssize_t(entry.cols)},
        {s, s * py::ssize_t(entry.rows)}, p->values().data() + entry.offset, owner);
  }
  return blocks;
}

// Registers the classes of each part with the module.
void BindSolvers(py::module_& m);
void BindEnergies(py::module_& m);
void BindMaps(py::module_& m);
void BindEnergyTransformer(py::module_& m);
void BindHopfieldLayer(py::module_& m);
void BindDifferentiation(py::module_& m);

}  // namespace implicit::python
