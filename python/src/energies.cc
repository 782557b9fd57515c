// Energies from Python: the Energy interface and the built-in attention energies.
#include "handles.h"

#include <implicit/layers/dense_associative_memory_energy.h>
#include <implicit/layers/modern_hopfield_energy.h>

#include <pybind11/stl.h>

#include <string>

namespace implicit::python {
namespace {

// n x B state of the energy's dtype (a view, no copy).
template <typename Scalar>
Eigen::Map<const Matrix<Scalar>> State(const EnergyHandle& e, const py::object& x,
                                       const char* name, Index cols = -1) {
  return View<Scalar>(x, name, e.get<Scalar>().dimension(), cols);
}

py::array Value(const EnergyHandle& e, const py::object& x) {
  return Dispatch(e.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    auto xs = State<Scalar>(e, x, "x");
    Vector<Scalar> values(xs.cols());
    {
      py::gil_scoped_release release;
      e.get<Scalar>().Value(xs, values);
    }
    return VectorToArray<Scalar>(values);
  });
}

// A method (x, [v]) -> n x B of the Energy interface.
template <typename Method>
py::array StateMethod(const EnergyHandle& e, const py::object& x, const py::object& v,
                      const char* v_name, Method method) {
  return Dispatch(e.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    auto xs = State<Scalar>(e, x, "x");
    Matrix<Scalar> out(xs.rows(), xs.cols());
    if (v.is_none()) {
      py::gil_scoped_release release;
      method(e.get<Scalar>(), xs, xs, out);
    } else {
      auto vs = State<Scalar>(e, v, v_name, xs.cols());
      py::gil_scoped_release release;
      method(e.get<Scalar>(), xs, vs, out);
    }
    return MatrixToArray<Scalar>(out);
  });
}

// Writable views of the parameter blocks, kept alive by the energy object.
py::dict Parameters(const py::object& self) {
  const EnergyHandle& e = self.cast<const EnergyHandle&>();
  return Dispatch(e.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    py::dict blocks;
    ParameterSet<Scalar>* p = e.get<Scalar>().parameters();
    if (p == nullptr) return blocks;
    for (const auto& entry : p->entries()) {
      const py::ssize_t s = sizeof(Scalar);
      blocks[py::str(entry.name)] = py::array(
          py::dtype::of<Scalar>(), {py::ssize_t(entry.rows), py::ssize_t(entry.cols)},
          {s, s * py::ssize_t(entry.rows)}, p->values().data() + entry.offset, self);
    }
    return blocks;
  });
}

py::object ParameterVector(const py::object& self) {
  const EnergyHandle& e = self.cast<const EnergyHandle&>();
  return Dispatch(e.dtype, [&](auto scalar) -> py::object {
    using Scalar = decltype(scalar);
    ParameterSet<Scalar>* p = e.get<Scalar>().parameters();
    if (p == nullptr) return py::array_t<Scalar>(0);
    return py::array(py::dtype::of<Scalar>(), {py::ssize_t(p->size())},
                     {py::ssize_t(sizeof(Scalar))}, p->values().data(), self);
  });
}

py::array ParameterVjp(const EnergyHandle& e, const py::object& x, const py::object& u) {
  return Dispatch(e.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    const Energy<Scalar>& energy = e.get<Scalar>();
    auto xs = State<Scalar>(e, x, "x");
    auto us = State<Scalar>(e, u, "u", xs.cols());
    Vector<Scalar> out(energy.num_parameters());
    {
      py::gil_scoped_release release;
      energy.ParameterVectorJacobianProduct(xs, us, out);
    }
    return VectorToArray<Scalar>(out);
  });
}

template <template <typename> class T>
struct BuiltinEnergy : EnergyHandle {
  Typed<T> typed;  // the same object as the base's, with its own methods
  template <typename Scalar>
  void Set(std::shared_ptr<T<Scalar>> energy) {
    typed.template set<Scalar>(energy);
    EnergyHandle::set<Scalar>(std::move(energy));
  }
};
using HopfieldHandle = BuiltinEnergy<ModernHopfieldEnergy>;
using DamHandle = BuiltinEnergy<DenseAssociativeMemoryEnergy>;

std::shared_ptr<HopfieldHandle> MakeHopfield(const py::object& patterns, double beta,
                                             bool learn_patterns, bool learn_beta,
                                             const py::object& dtype) {
  auto handle = std::make_shared<HopfieldHandle>();
  handle->type_name = "ModernHopfieldEnergy";
  const Dtype d = dtype.is_none() ? DtypeOfData(patterns) : ParseDtype(dtype, "dtype");
  Dispatch(d, [&](auto scalar) {
    using Scalar = decltype(scalar);
    typename ModernHopfieldEnergy<Scalar>::Options o;
    o.beta = beta;
    o.learn_patterns = learn_patterns;
    o.learn_beta = learn_beta;
    handle->Set(std::make_shared<ModernHopfieldEnergy<Scalar>>(
        CopyMatrix<Scalar>(patterns, "patterns"), o));
  });
  return handle;
}

// "quadratic", "polynomial", "rectified_polynomial", "exponential".
Interaction ParseInteraction(const std::string& name, int degree, double beta) {
  Interaction f;
  if (name == "quadratic") {
    f = Interaction::Quadratic();
  } else if (name == "polynomial") {
    f = Interaction::Polynomial(degree);
  } else if (name == "rectified_polynomial") {
    f = Interaction::RectifiedPolynomial(degree);
  } else if (name == "exponential") {
    f = Interaction::Exponential(beta);
  } else {
    throw py::value_error("interaction: '" + name +
                          "' is unknown (quadratic, polynomial, rectified_polynomial, "
                          "exponential)");
  }
  return f;
}

std::shared_ptr<DamHandle> MakeDam(const py::object& patterns, const std::string& interaction,
                                   int degree, double beta, const std::string& domain,
                                   double box_gain, bool learn_patterns, const py::object& dtype) {
  auto handle = std::make_shared<DamHandle>();
  handle->type_name = "DenseAssociativeMemoryEnergy";
  if (domain != "euclidean" && domain != "box") {
    throw py::value_error("domain: '" + domain + "' is unknown (euclidean, box)");
  }
  const Dtype d = dtype.is_none() ? DtypeOfData(patterns) : ParseDtype(dtype, "dtype");
  Dispatch(d, [&](auto scalar) {
    using Scalar = decltype(scalar);
    typename DenseAssociativeMemoryEnergy<Scalar>::Options o;
    o.interaction = ParseInteraction(interaction, degree, beta);
    o.domain = domain == "box" ? StateDomain::kBox : StateDomain::kEuclidean;
    o.box_gain = box_gain;
    o.learn_patterns = learn_patterns;
    handle->Set(std::make_shared<DenseAssociativeMemoryEnergy<Scalar>>(
        CopyMatrix<Scalar>(patterns, "patterns"), o));
  });
  return handle;
}

}  // namespace

void BindEnergies(py::module_& m) {
  py::class_<EnergyHandle, std::shared_ptr<EnergyHandle>>(m, "Energy", R"(An energy E(x) per sample.

States x are dimension x batch arrays in Fortran order of the energy's dtype
(used in place, never copied); results are new arrays.)")
      .def_property_readonly("dimension",
                             [](const EnergyHandle& e) {
                               return Dispatch(e.dtype, [&](auto s) {
                                 return e.get<decltype(s)>().dimension();
                               });
                             })
      .def_property_readonly("dtype", [](const EnergyHandle& e) { return DtypeName(e.dtype); })
      .def_property_readonly("num_parameters",
                             [](const EnergyHandle& e) {
                               return Dispatch(e.dtype, [&](auto s) {
                                 return e.get<decltype(s)>().num_parameters();
                               });
                             })
      .def("value", &Value, py::arg("x"), "E(x_b) for every column: a 1-D array of B values.")
      .def(
          "gradient",
          [](const EnergyHandle& e, const py::object& x) {
            return StateMethod(e, x, py::none(), "", [](const auto& energy, auto x_, auto, auto& g) {
              energy.Gradient(x_, g);
            });
          },
          py::arg("x"))
      .def(
          "hessian_vector_product",
          [](const EnergyHandle& e, const py::object& x, const py::object& v) {
            return StateMethod(e, x, v, "v", [](const auto& energy, auto x_, auto v_, auto& hv) {
              energy.HessianVectorProduct(x_, v_, hv);
            });
          },
          py::arg("x"), py::arg("v"))
      .def_property_readonly("parameters", &Parameters,
                             "dict name -> writable view of each parameter block (no copy)")
      .def_property_readonly("parameter_vector", &ParameterVector,
                             "all parameters as one writable 1-D view, in the layout of "
                             "parameter gradients")
      .def("parameter_vector_jacobian_product", &ParameterVjp, py::arg("x"), py::arg("u"),
           "d/dtheta sum_b <grad_x E(x_b), u_b> as a 1-D array (parameter_vector's layout).")
      .def("__repr__", [](const EnergyHandle& e) {
        return "<" + std::string(e.type_name) + " " + DtypeName(e.dtype) + ">";
      });

  py::class_<HopfieldHandle, EnergyHandle, std::shared_ptr<HopfieldHandle>>(
      m, "ModernHopfieldEnergy",
      R"(E(x) = 0.5 |x|^2 - (1/beta) lse(beta X^T x) for stored patterns X (n x N).

Its CCCP map (implicit.CccpMap) is softmax attention x <- X softmax(beta X^T x).
dtype: float64 or float32 (default: float32 when patterns are float32, else
float64). Parameters: "beta" when learn_beta, "X" when learn_patterns.)")
      .def(py::init(&MakeHopfield), py::arg("patterns"), py::arg("beta") = 1.0,
           py::arg("learn_patterns") = false, py::arg("learn_beta") = true,
           py::arg("dtype") = py::none())
      .def_property_readonly("beta",
                             [](const HopfieldHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return double(h.typed.get<decltype(s)>().beta());
                               });
                             })
      .def_property_readonly("patterns",
                             [](const HopfieldHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 using Scalar = decltype(s);
                                 return MatrixToArray<Scalar>(h.typed.get<Scalar>().patterns());
                               });
                             })
      .def(
          "attention",
          [](const HopfieldHandle& h, const py::object& x) {
            return Dispatch(h.dtype, [&](auto s) {
              using Scalar = decltype(s);
              const ModernHopfieldEnergy<Scalar>& energy = h.typed.get<Scalar>();
              auto xs = View<Scalar>(x, "x", energy.dimension(), -1);
              Matrix<Scalar> p(energy.num_patterns(), xs.cols());
              {
                py::gil_scoped_release release;
                energy.Attention(xs, p);
              }
              return MatrixToArray<Scalar>(p);
            });
          },
          py::arg("x"), "softmax(beta X^T x): the N x B attention weights.");

  py::class_<DamHandle, EnergyHandle, std::shared_ptr<DamHandle>>(
      m, "DenseAssociativeMemoryEnergy",
      R"(E(x) = 0.5 |x|^2 - sum_mu F(X_mu . x) (domain "euclidean"), or with an
entropy barrier on (-1, 1)^n (domain "box"); F is the interaction:
"quadratic", "polynomial" / "rectified_polynomial" (degree >= 2), "exponential"
(rate beta). Parameters: "X" when learn_patterns.)")
      .def(py::init(&MakeDam), py::arg("patterns"), py::arg("interaction") = "quadratic",
           py::arg("degree") = 2, py::arg("beta") = 1.0, py::arg("domain") = "euclidean",
           py::arg("box_gain") = 1.0, py::arg("learn_patterns") = false,
           py::arg("dtype") = py::none());
}

}  // namespace implicit::python
