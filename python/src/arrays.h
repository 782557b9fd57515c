// numpy arrays <-> Eigen for the Python module: the dtype of an object,
// dispatch on it, and checked views of column-major arrays (no copies).
//
// What is copied (docs/python.md says the same to users):
//   - arrays a C++ routine reads or writes during a call (solve's z, the
//     state x of an energy, directions, loss gradients) are viewed in place
//     and must be 2-D, Fortran-ordered (column-major), of the object's dtype;
//     anything else raises TypeError (not an array, wrong dtype) or
//     ValueError (shape, order, read-only) naming the argument;
//   - constructor data (stored patterns) is copied into the object once;
//   - results are new arrays;
//   - a Python map receives a copy of the iterate (so it may keep it).
#pragma once

#include <implicit/core/types.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace implicit::python {

namespace py = pybind11;

enum class Dtype { kFloat64, kFloat32 };

// The name of `object`'s Python type ("NoneType", "str", "ndarray"), for the
// "expected ..., got ..." of a TypeError.
inline std::string TypeName(py::handle object) {
  return std::string(py::str(py::type::handle_of(object).attr("__name__")));
}

// "float64" / "float32".
const char* DtypeName(Dtype dtype);
template <typename Scalar>
constexpr Dtype DtypeOf() {
  return sizeof(Scalar) == sizeof(double) ? Dtype::kFloat64 : Dtype::kFloat32;
}
// numpy's dtype objects, type objects (np.float32) and names ("float32").
// Anything else raises TypeError naming `argument`.
Dtype ParseDtype(const py::object& dtype, const char* argument);
// The dtype of an array-like's elements: float32 stays float32, everything
// else (float64, integers, lists of numbers) is float64.
Dtype DtypeOfData(const py::object& data);
// The dtype asked for (argument "dtype"), or the data's when it is None.
inline Dtype DtypeOrData(const py::object& dtype, const py::object& data) {
  return dtype.is_none() ? DtypeOfData(data) : ParseDtype(dtype, "dtype");
}

// Calls fn(Scalar()) with Scalar = double or float and returns its result.
template <typename Fn>
decltype(auto) Dispatch(Dtype dtype, Fn&& fn) {
  if (dtype == Dtype::kFloat64) return fn(double());
  return fn(float());
}

// Checks that `array` (the argument called `name`) is a 2-D, Fortran-ordered
// numpy array of `dtype`, with `rows` rows and `cols` columns (-1: any), and
// writable if `writable`. Raises TypeError / ValueError naming it otherwise.
py::array CheckedArray(const py::handle& array, const char* name, Dtype dtype, Index rows,
                       Index cols, bool writable);

template <typename Scalar>
Eigen::Map<Matrix<Scalar>> WritableView(const py::handle& array, const char* name, Index rows,
                                        Index cols) {
  py::array a = CheckedArray(array, name, DtypeOf<Scalar>(), rows, cols, true);
  return Eigen::Map<Matrix<Scalar>>(static_cast<Scalar*>(a.mutable_data()), a.shape(0),
                                    a.shape(1));
}
template <typename Scalar>
Eigen::Map<const Matrix<Scalar>> View(const py::handle& array, const char* name, Index rows,
                                      Index cols) {
  py::array a = CheckedArray(array, name, DtypeOf<Scalar>(), rows, cols, false);
  return Eigen::Map<const Matrix<Scalar>>(static_cast<const Scalar*>(a.data()), a.shape(0),
                                          a.shape(1));
}

// A copy of constructor data (any array-like of numbers, 2-D) as a matrix.
template <typename Scalar>
Matrix<Scalar> CopyMatrix(const py::object& data, const char* name) {
  auto a = py::array_t<Scalar, py::array::f_style | py::array::forcecast>::ensure(data);
  if (!a) throw py::type_error(std::string(name) + ": expected an array of numbers");
  if (a.ndim() != 2) {
    throw py::value_error(std::string(name) + ": expected a 2-D array, got " +
                          std::to_string(a.ndim()) + "-D");
  }
  return Eigen::Map<const Matrix<Scalar>>(a.data(), a.shape(0), a.shape(1));
}

// New column-major arrays holding copies.
template <typename Scalar>
py::array MatrixToArray(ConstMatrixRef<Scalar> m) {
  py::array_t<Scalar, py::array::f_style> out({m.rows(), m.cols()});
  Eigen::Map<Matrix<Scalar>>(out.mutable_data(), m.rows(), m.cols()) = m;
  return std::move(out);
}
template <typename Scalar>
py::array VectorToArray(const Vector<Scalar>& v) {
  py::array_t<Scalar> out(v.size());
  Eigen::Map<Vector<Scalar>>(out.mutable_data(), v.size()) = v;
  return std::move(out);
}
template <typename T>
py::array ToArray(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return std::move(out);
}

}  // namespace implicit::python
