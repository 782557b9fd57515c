// Maps from Python: the energy adapters (CccpMap, GradientStepMap,
// EnergyRootMap) and PythonMap, a map whose f (and JVP / VJP) are Python
// callables on a batch.
#include "handles.h"

#include <implicit/core/energy_maps.h>

#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace implicit::python {
namespace {

// f(z), and optionally z, v -> J v and z, u -> J^T u, as Python callables on
// dimension x batch arrays. Called with the GIL (taken here; solvers release
// it). An exception in a callable, or a result of the wrong shape, is stored
// in `errors` and the output is filled with NaN: the solve then stops at its
// next iteration and the binding raises the exception.
template <typename Scalar>
class CallbackMap : public FixedPointMap<Scalar> {
 public:
  CallbackMap(Index dimension, py::object f, py::object jvp, py::object vjp,
              std::shared_ptr<PendingError> errors)
      : dimension_(dimension),
        f_(std::move(f)),
        jvp_(std::move(jvp)),
        vjp_(std::move(vjp)),
        errors_(std::move(errors)) {}

  Index dimension() const override { return dimension_; }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    Call(f_, "f", z, nullptr, out);
  }
  bool HasJacobianProducts() const override { return !jvp_.is_none() || !vjp_.is_none(); }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    if (jvp_.is_none()) throw std::logic_error("PythonMap: this needs jvp=, which was not given");
    Call(jvp_, "jvp", z, &v, out);
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> u,
                             MatrixRef<Scalar> out) const override {
    if (vjp_.is_none()) throw std::logic_error("PythonMap: this needs vjp=, which was not given");
    Call(vjp_, "vjp", z, &u, out);
  }

 private:
  void Call(const py::object& fn, const char* name, ConstMatrixRef<Scalar> z,
            const ConstMatrixRef<Scalar>* v, MatrixRef<Scalar> out) const {
    py::gil_scoped_acquire gil;
    out.setConstant(std::numeric_limits<Scalar>::quiet_NaN());
    if (errors_->pending()) return;
    try {
      py::object result = v == nullptr ? fn(MatrixToArray<Scalar>(z))
                                       : fn(MatrixToArray<Scalar>(z), MatrixToArray<Scalar>(*v));
      auto a = py::array_t<Scalar, py::array::f_style | py::array::forcecast>::ensure(result);
      if (!a) {
        PyErr_SetString(PyExc_TypeError,
                        ("PythonMap: " + std::string(name) + " returned a " + TypeName(result) +
                         " that is not an array of numbers")
                            .c_str());
        throw py::error_already_set();
      }
      if (a.ndim() != 2 || a.shape(0) != out.rows() || a.shape(1) != out.cols()) {
        std::string got = "(";
        for (py::ssize_t i = 0; i < a.ndim(); ++i) {
          got += (i ? ", " : "") + std::to_string(a.shape(i));
        }
        PyErr_SetString(PyExc_ValueError,
                        ("PythonMap: " + std::string(name) + " returned shape " + got +
                         "), expected (" + std::to_string(out.rows()) + ", " +
                         std::to_string(out.cols()) + ")")
                            .c_str());
        throw py::error_already_set();
      }
      out = Eigen::Map<const Matrix<Scalar>>(a.data(), out.rows(), out.cols());
    } catch (py::error_already_set& e) {
      out.setConstant(std::numeric_limits<Scalar>::quiet_NaN());
      errors_->Store(std::move(e));
    }
  }

  Index dimension_;
  py::object f_, jvp_, vjp_;
  std::shared_ptr<PendingError> errors_;
};

// One Python class per adapter of energy_maps.h.
struct CccpMapHandle : MapHandle {};
struct GradientStepMapHandle : MapHandle {};
struct EnergyRootMapHandle : MapHandle {};
struct PythonMapHandle : MapHandle {};

template <typename Handle>
std::shared_ptr<Handle> MakeEnergyMap(const py::object& energy_object, double step) {
  if (!py::isinstance<EnergyHandle>(energy_object)) {
    throw py::type_error("energy: expected an implicit.Energy");
  }
  const EnergyHandle& energy = energy_object.cast<const EnergyHandle&>();
  auto handle = std::make_shared<Handle>();
  handle->keep_alive = energy_object;
  Dispatch(energy.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const Energy<Scalar>& e = energy.get<Scalar>();
    if constexpr (std::is_same_v<Handle, CccpMapHandle>) {
      handle->type_name = "CccpMap";
      handle->template set<Scalar>(std::make_shared<CccpMap<Scalar>>(e));
    } else if constexpr (std::is_same_v<Handle, GradientStepMapHandle>) {
      handle->type_name = "GradientStepMap";
      handle->template set<Scalar>(std::make_shared<GradientStepMap<Scalar>>(e, Scalar(step)));
    } else {
      handle->type_name = "EnergyRootMap";
      handle->template set<Scalar>(std::make_shared<EnergyRootMap<Scalar>>(e));
    }
  });
  return handle;
}

std::shared_ptr<PythonMapHandle> MakePythonMap(Index dimension, const py::object& f,
                                         const py::object& jvp, const py::object& vjp,
                                         const py::object& dtype) {
  if (dimension < 1) {
    throw py::value_error("dimension: must be >= 1, got " + std::to_string(dimension));
  }
  for (auto [name, fn] : {std::pair<const char*, const py::object*>{"f", &f}, {"jvp", &jvp},
                          {"vjp", &vjp}}) {
    if (!fn->is_none() && !PyCallable_Check(fn->ptr())) {
      throw py::type_error(std::string(name) + ": expected a callable");
    }
  }
  if (f.is_none()) throw py::type_error("f: expected a callable");
  auto handle = std::make_shared<PythonMapHandle>();
  handle->type_name = "PythonMap";
  handle->errors = std::make_shared<PendingError>();
  handle->keep_alive = py::make_tuple(f, jvp, vjp);
  Dispatch(ParseDtype(dtype, "dtype"), [&](auto scalar) {
    using Scalar = decltype(scalar);
    handle->set<Scalar>(std::make_shared<CallbackMap<Scalar>>(dimension, f, jvp, vjp,
                                                              handle->errors));
  });
  return handle;
}

// A product (z, w) -> n x B of the map interface, called from Python.
template <typename Method>
py::array MapProduct(const MapHandle& map, const py::object& z, const py::object& w,
                     const char* w_name, Method method) {
  return Dispatch(map.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const FixedPointMap<Scalar>& f = map.get<Scalar>();
    auto zs = View<Scalar>(z, "z", f.dimension(), -1);
    std::optional<Eigen::Map<const Matrix<Scalar>>> ws;
    // A method of z alone has no w_name; a direction (v, w) is an array, never None.
    if (w_name[0] != '\0') ws.emplace(View<Scalar>(w, w_name, f.dimension(), zs.cols()));
    Matrix<Scalar> out(zs.rows(), zs.cols());
    {
      py::gil_scoped_release release;
      method(f, zs, ws ? *ws : zs, out);
    }
    map.RaisePendingError();
    return MatrixToArray<Scalar>(out);
  });
}

}  // namespace

void BindMaps(py::module_& m) {
  py::class_<MapHandle, std::shared_ptr<MapHandle>>(m, "Map", R"(A batched fixed-point map z -> f(z).

Arrays are dimension x batch, Fortran order, of the map's dtype.)")
      .def_property_readonly("dimension",
                             [](const MapHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.get<decltype(s)>().dimension();
                               });
                             })
      .def_property_readonly("dtype", [](const MapHandle& h) { return DtypeName(h.dtype); })
      .def_property_readonly("has_jacobian_products",
                             [](const MapHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.get<decltype(s)>().HasJacobianProducts();
                               });
                             })
      .def_property_readonly("energy",
                             [](const MapHandle& h) -> py::object {
                               if (h.keep_alive && py::isinstance<EnergyHandle>(h.keep_alive)) {
                                 return h.keep_alive;
                               }
                               return py::none();
                             })
      .def(
          "evaluate",
          [](const MapHandle& h, const py::object& z) {
            return MapProduct(h, z, py::none(), "", [](const auto& f, auto z_, auto, auto& out) {
              f.Evaluate(z_, out);
            });
          },
          py::arg("z"), "f(z) for every column.")
      .def(
          "jacobian_vector_product",
          [](const MapHandle& h, const py::object& z, const py::object& v) {
            return MapProduct(h, z, v, "v", [](const auto& f, auto z_, auto v_, auto& out) {
              f.JacobianVectorProduct(z_, v_, out);
            });
          },
          py::arg("z"), py::arg("v"))
      .def(
          "vector_jacobian_product",
          [](const MapHandle& h, const py::object& z, const py::object& u) {
            return MapProduct(h, z, u, "u", [](const auto& f, auto z_, auto u_, auto& out) {
              f.VectorJacobianProduct(z_, u_, out);
            });
          },
          py::arg("z"), py::arg("u"))
      .def("__repr__", [](const MapHandle& h) {
        return "<" + std::string(h.type_name) + " " + DtypeName(h.dtype) + ">";
      });

  py::class_<CccpMapHandle, MapHandle, std::shared_ptr<CccpMapHandle>>(
      m, "CccpMap",
      "The CCCP step z -> grad Phi(z) of E = 0.5|z|^2 - Phi(z) (softmax attention for the "
      "Hopfield energy). Keeps the energy alive.")
      .def(py::init([](const py::object& energy) {
             return MakeEnergyMap<CccpMapHandle>(energy, 1.0);
           }),
           py::arg("energy"));
  py::class_<GradientStepMapHandle, MapHandle, std::shared_ptr<GradientStepMapHandle>>(
      m, "GradientStepMap", "z -> z - step * grad E(z).")
      .def(py::init([](const py::object& energy, double step) {
             return MakeEnergyMap<GradientStepMapHandle>(energy, step);
           }),
           py::arg("energy"), py::arg("step"));
  py::class_<EnergyRootMapHandle, MapHandle, std::shared_ptr<EnergyRootMapHandle>>(
      m, "EnergyRootMap", "z -> z - grad E(z): the root problem grad E = 0 (newton, lbfgs).")
      .def(py::init([](const py::object& energy) {
             return MakeEnergyMap<EnergyRootMapHandle>(energy, 1.0);
           }),
           py::arg("energy"));
  py::class_<PythonMapHandle, MapHandle, std::shared_ptr<PythonMapHandle>>(m, "PythonMap",
                                                                         R"(A map defined in Python.

PythonMap(dimension, f, jvp=None, vjp=None, dtype="float64"):
f(z) -> array of z's shape, for z of shape (dimension, batch) (a copy the
callable may keep). Optional jvp(z, v) -> J v and vjp(z, u) -> J^T u (newton
needs jvp, implicit.backward needs vjp). Called with the GIL while the solver
runs in C++; an exception stops the solve and is re-raised by solve().)")
      .def(py::init(&MakePythonMap), py::arg("dimension"), py::arg("f"),
           py::arg("jvp") = py::none(), py::arg("vjp") = py::none(),
           py::arg("dtype") = "float64");
}

}  // namespace implicit::python
