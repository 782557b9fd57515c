// Energies from Python: the Energy interface and the built-in attention energies.
#include "handles.h"

#include <implicit/layers/dense_associative_memory_energy.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/hidden_prior.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/layers/rbm.h>
#include <implicit/layers/regularized_attention.h>

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
    if (v_name[0] == '\0') {  // a method of x alone (v unused); a direction is never None
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
    return ParameterViews(e.get<decltype(scalar)>().parameters(), self);
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

using HopfieldHandle = BuiltinEnergy<ModernHopfieldEnergy>;
using DamHandle = BuiltinEnergy<DenseAssociativeMemoryEnergy>;

std::shared_ptr<HopfieldHandle> MakeHopfield(const py::object& patterns, double beta,
                                             bool learn_patterns, bool learn_beta,
                                             const py::object& dtype) {
  return MakeBuiltinEnergy<ModernHopfieldEnergy>(
      "ModernHopfieldEnergy", DtypeOrData(dtype, patterns), [&](auto scalar) {
        using Scalar = decltype(scalar);
        typename ModernHopfieldEnergy<Scalar>::Options o;
        o.beta = beta;
        o.learn_patterns = learn_patterns;
        o.learn_beta = learn_beta;
        return std::make_shared<ModernHopfieldEnergy<Scalar>>(
            CopyMatrix<Scalar>(patterns, "patterns"), o);
      });
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
  if (domain != "euclidean" && domain != "box") {
    throw py::value_error("domain: '" + domain + "' is unknown (euclidean, box)");
  }
  return MakeBuiltinEnergy<DenseAssociativeMemoryEnergy>(
      "DenseAssociativeMemoryEnergy", DtypeOrData(dtype, patterns), [&](auto scalar) {
        using Scalar = decltype(scalar);
        typename DenseAssociativeMemoryEnergy<Scalar>::Options o;
        o.interaction = ParseInteraction(interaction, degree, beta);
        o.domain = domain == "box" ? StateDomain::kBox : StateDomain::kEuclidean;
        o.box_gain = box_gain;
        o.learn_patterns = learn_patterns;
        return std::make_shared<DenseAssociativeMemoryEnergy<Scalar>>(
            CopyMatrix<Scalar>(patterns, "patterns"), o);
      });
}

using SparseHopfieldHandle = BuiltinEnergy<SparseHopfieldEnergy>;
using RbmHandle = BuiltinEnergy<RbmEnergy>;

std::shared_ptr<SparseHopfieldHandle> MakeSparseHopfield(const py::object& patterns,
                                                         double alpha, double beta,
                                                         bool learn_alpha,
                                                         const py::object& dtype) {
  SparseHopfieldOptions o;
  o.alpha = alpha;
  o.beta = beta;
  o.learn_alpha = learn_alpha;
  return MakeBuiltinEnergy<SparseHopfieldEnergy>(
      "SparseHopfieldEnergy", DtypeOrData(dtype, patterns), [&](auto scalar) {
        using Scalar = decltype(scalar);
        return std::make_shared<SparseHopfieldEnergy<Scalar>>(
            CopyMatrix<Scalar>(patterns, "patterns"), o);
      });
}

// A hidden-unit prior by kind and values (each a scalar for every unit or one
// value per unit), built for the energy's scalar type when the energy is made.
struct PriorSpec {
  std::string kind;  // gaussian, poisson, bernoulli, constant
  std::vector<double> first, second;

  template <typename Scalar>
  std::shared_ptr<const HiddenPrior<Scalar>> Make() const {
    auto vec = [](const std::vector<double>& v) {
      return Eigen::Map<const Vector<double>>(v.data(), Index(v.size())).cast<Scalar>().eval();
    };
    if (kind == "gaussian") return std::make_shared<GaussianPrior<Scalar>>(vec(first), vec(second));
    if (kind == "poisson") return std::make_shared<PoissonPrior<Scalar>>(vec(first));
    if (kind == "bernoulli") return std::make_shared<BernoulliPrior<Scalar>>(vec(first));
    return std::make_shared<ConstantPrior<Scalar>>(vec(first));
  }
};

// A scalar or a 1-D array of per-unit values.
std::vector<double> PerUnit(const py::object& value, const char* name) {
  auto a = py::array_t<double, py::array::forcecast>::ensure(value);
  if (!a || a.ndim() > 1 || a.size() == 0) {
    throw py::value_error(std::string(name) + ": expected a number or a 1-D array of numbers");
  }
  return std::vector<double>(a.data(), a.data() + a.size());
}

PriorSpec MakePrior(const std::string& kind, const py::object& first, const char* first_name,
                    const py::object& second = py::none(), const char* second_name = "") {
  PriorSpec spec{kind, PerUnit(first, first_name), {}};
  if (!second.is_none()) spec.second = PerUnit(second, second_name);
  // Validate now (the priors' own checks), in double.
  spec.Make<double>();
  return spec;
}

std::shared_ptr<RbmHandle> MakeRbm(const py::object& weights, const PriorSpec& prior,
                                   const std::string& visible, bool learn_weights,
                                   bool learn_bias, const py::object& dtype) {
  if (visible != "gaussian" && visible != "binary") {
    throw py::value_error("visible: '" + visible + "' is unknown (gaussian, binary)");
  }
  return MakeBuiltinEnergy<RbmEnergy>("RbmEnergy", DtypeOrData(dtype, weights), [&](auto scalar) {
    using Scalar = decltype(scalar);
    typename RbmEnergy<Scalar>::Options o;
    o.visible = visible == "binary" ? VisibleType::kBinary : VisibleType::kGaussian;
    o.learn_weights = learn_weights;
    o.learn_bias = learn_bias;
    return std::make_shared<RbmEnergy<Scalar>>(CopyMatrix<Scalar>(weights, "weights"),
                                               prior.Make<Scalar>(), o);
  });
}

// entmax over the columns of an N x B score array, in the array's dtype.
template <typename Fn>
py::array ColumnwiseScores(const py::object& scores, const char* name, Fn fn) {
  const Dtype d = DtypeOfData(scores);
  return Dispatch(d, [&](auto scalar) {
    using Scalar = decltype(scalar);
    auto s = View<Scalar>(scores, name, -1, -1);
    Matrix<Scalar> out(s.rows(), s.cols());
    fn(s, out);
    return MatrixToArray<Scalar>(out);
  });
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
          "descent_direction",
          [](const EnergyHandle& e, const py::object& x) {
            return StateMethod(e, x, py::none(), "", [](const auto& energy, auto x_, auto, auto& d) {
              energy.DescentDirection(x_, d);
            });
          },
          py::arg("x"), "The direction of the energy's own dynamics (the gradient by default).")
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

  py::class_<SparseHopfieldHandle, EnergyHandle, std::shared_ptr<SparseHopfieldHandle>>(
      m, "SparseHopfieldEnergy",
      R"(E(x) = 0.5 |x|^2 - (1/beta) Omega*_alpha(beta X^T x): Hopfield retrieval with
alpha-entmax attention (alpha = 1 softmax, 1.5 entmax15, 2 sparsemax). Its CCCP map
is x <- X entmax_alpha(beta X^T x). Parameters: "X" (always), "alpha" when
learn_alpha (alpha > 1).)")
      .def(py::init(&MakeSparseHopfield), py::arg("patterns"), py::arg("alpha") = 1.5,
           py::arg("beta") = 1.0, py::arg("learn_alpha") = false, py::arg("dtype") = py::none())
      .def(
          "attention",
          [](const SparseHopfieldHandle& h, const py::object& x) {
            return Dispatch(h.dtype, [&](auto s) {
              using Scalar = decltype(s);
              const SparseHopfieldEnergy<Scalar>& energy = h.typed.get<Scalar>();
              auto xs = View<Scalar>(x, "x", energy.dimension(), -1);
              Matrix<Scalar> p(energy.num_patterns(), xs.cols());
              energy.Weights(xs, p);
              return MatrixToArray<Scalar>(p);
            });
          },
          py::arg("x"), "entmax_alpha(beta X^T x): the N x B (sparse) attention weights.");

  m.def(
      "entmax",
      [](const py::object& scores, double alpha) {
        return ColumnwiseScores(scores, "scores", [&](auto s, auto& p) {
          using Scalar = typename std::decay_t<decltype(p)>::Scalar;
          entmax::Entmax<Scalar>(s, Scalar(alpha), p);
        });
      },
      py::arg("scores"), py::arg("alpha") = 1.5,
      "alpha-entmax of each column of an N x B score array (1: softmax, 2: sparsemax); "
      "-inf entries get weight exactly 0.");
  m.def(
      "sparsemax",
      [](const py::object& scores) {
        return ColumnwiseScores(scores, "scores", [&](auto s, auto& p) {
          using Scalar = typename std::decay_t<decltype(p)>::Scalar;
          entmax::Entmax<Scalar>(s, Scalar(2), p);
        });
      },
      py::arg("scores"), "Sparsemax (the Euclidean projection onto the simplex) of each column.");
  m.def(
      "entmax_jacobian_vector_product",
      [](const py::object& p, double alpha, const py::object& v) {
        return Dispatch(DtypeOfData(p), [&](auto scalar) {
          using Scalar = decltype(scalar);
          auto ps = View<Scalar>(p, "p", -1, -1);
          auto vs = View<Scalar>(v, "v", ps.rows(), ps.cols());
          Matrix<Scalar> out(ps.rows(), ps.cols());
          entmax::JacobianVectorProduct<Scalar>(ps, Scalar(alpha), vs, out);
          return MatrixToArray<Scalar>(out);
        });
      },
      py::arg("p"), py::arg("alpha"), py::arg("v"),
      "dp/ds v at the weights p = entmax_alpha(s) (symmetric: also the VJP).");

  py::class_<PriorSpec>(m, "HiddenPrior", R"(The prior of an RBM's hidden units, by its
cumulant generating function K. Values are one number for every unit or a 1-D
array with one per unit.)")
      .def_static(
          "gaussian",
          [](const py::object& mean, const py::object& stddev) {
            return MakePrior("gaussian", mean, "mean", stddev, "stddev");
          },
          py::arg("mean") = 0.0, py::arg("stddev") = 1.0, "K(t) = m t + s^2 t^2 / 2")
      .def_static(
          "poisson", [](const py::object& rate) { return MakePrior("poisson", rate, "rate"); },
          py::arg("rate") = 1.0, "K(t) = l (e^t - 1)")
      .def_static(
          "bernoulli", [](const py::object& p) { return MakePrior("bernoulli", p, "p"); },
          py::arg("p") = 0.5, "K(t) = log(1 - p + p e^t)")
      .def_static(
          "constant", [](const py::object& c) { return MakePrior("constant", c, "c"); },
          py::arg("c") = 1.0, "K(t) = c t (h = c with certainty)")
      .def_readonly("kind", &PriorSpec::kind)
      .def("__repr__", [](const PriorSpec& p) { return "<HiddenPrior " + p.kind + ">"; });

  py::class_<RbmHandle, EnergyHandle, std::shared_ptr<RbmHandle>>(
      m, "RbmEnergy",
      R"(The RBM-effective energy E(v) = 0.5|v|^2 - b.v - sum_mu K_mu(w_mu . v) of an RBM
with couplings W (n x M) and hidden prior K (implicit.HiddenPrior), hidden units
integrated out; visible "gaussian" (with 0.5|v|^2) or "binary". Parameters: "W"
when learn_weights, "b" when learn_bias.)")
      .def(py::init(&MakeRbm), py::arg("weights"), py::arg("prior"),
           py::arg("visible") = "gaussian", py::arg("learn_weights") = true,
           py::arg("learn_bias") = false, py::arg("dtype") = py::none());
}

}  // namespace implicit::python
