// The Python module implicit._implicit (imported by python/implicit/__init__.py).
#include "arrays.h"
#include "handles.h"

#include <sstream>

namespace implicit::python {

const char* DtypeName(Dtype dtype) { return dtype == Dtype::kFloat64 ? "float64" : "float32"; }

Dtype ParseDtype(const py::object& dtype, const char* argument) {
  py::dtype parsed;
  try {
    parsed = py::dtype::from_args(dtype);
  } catch (py::error_already_set&) {
    throw py::type_error(std::string(argument) + ": not a dtype: " +
                         std::string(py::str(py::repr(dtype))));
  }
  if (parsed.kind() == 'f' && parsed.itemsize() == 8) return Dtype::kFloat64;
  if (parsed.kind() == 'f' && parsed.itemsize() == 4) return Dtype::kFloat32;
  throw py::type_error(std::string(argument) + ": dtype must be float64 or float32, got " +
                       std::string(py::str(parsed)));
}

Dtype DtypeOfData(const py::object& data) {
  if (py::isinstance<py::array>(data)) {
    py::dtype dtype = py::reinterpret_borrow<py::array>(data).dtype();
    if (dtype.kind() == 'f' && dtype.itemsize() == 4) return Dtype::kFloat32;
  }
  return Dtype::kFloat64;
}

py::array CheckedArray(const py::handle& object, const char* name, Dtype dtype, Index rows,
                       Index cols, bool writable) {
  const std::string want = DtypeName(dtype);
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error(std::string(name) + ": expected a numpy array of " + want + ", got " + TypeName(object));
  }
  py::array a = py::reinterpret_borrow<py::array>(object);
  py::dtype got = a.dtype();
  const bool native = got.attr("isnative").cast<bool>();
  if (got.kind() != 'f' || got.itemsize() != (dtype == Dtype::kFloat64 ? 8 : 4) || !native) {
    throw py::type_error(std::string(name) + ": expected dtype " + want + ", got " +
                         std::string(py::str(got)) + " (convert with np.asfortranarray(" +
                         name + ", dtype=np." + want + "))");
  }
  std::ostringstream shape;
  if (a.ndim() != 2) {
    throw py::value_error(std::string(name) + ": expected a 2-D array (dimension x batch), got " +
                          std::to_string(a.ndim()) + "-D");
  }
  if ((rows >= 0 && a.shape(0) != rows) || (cols >= 0 && a.shape(1) != cols)) {
    shape << name << ": expected shape (" << rows << ", ";
    if (cols >= 0) {
      shape << cols;
    } else {
      shape << "batch";
    }
    shape << "), got (" << a.shape(0) << ", " << a.shape(1) << ")";
    throw py::value_error(shape.str());
  }
  if (!(a.flags() & py::array::f_style)) {
    throw py::value_error(std::string(name) +
                          ": expected a Fortran-ordered (column-major) array; convert with "
                          "np.asfortranarray(" + name + ") (arrays are used in place, never "
                          "copied silently)");
  }
  if (writable && !a.writeable()) {
    throw py::value_error(std::string(name) + ": the array is read-only; it is written in place");
  }
  return a;
}

py::list StatusNames(const std::vector<TerminationType>& status) {
  py::list names;
  for (TerminationType t : status) names.append(TerminationTypeToString(t));
  return names;
}

void PendingError::RaiseIfPending(const py::object& summary) {
  if (!error_) return;
  py::error_already_set error = std::move(*error_);
  error_.reset();
  if (!summary.is_none()) {
    try {
      error.value().attr("summary") = summary;
    } catch (py::error_already_set&) {
      // an exception type without a __dict__: raise it without the summary
    }
  }
  throw error;
}

}  // namespace implicit::python

PYBIND11_MODULE(_implicit, m) {
  m.doc() =
      "libimplicit: deep-equilibrium solvers, energy-based attention layers and implicit "
      "gradients (the C++ library's Python binding; see docs/python.md).";
  implicit::python::BindEnergies(m);
  implicit::python::BindMaps(m);
  implicit::python::BindEnergyTransformer(m);
  implicit::python::BindSolvers(m);
  implicit::python::BindDifferentiation(m);
  implicit::python::BindHopfieldLayer(m);
}
