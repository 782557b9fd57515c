// The Energy Transformer from Python: its energy (tokens as one column per
// sample) and the map of its dynamics, with clamped tokens.
#include "handles.h"

#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/energy_transformer_map.h>

#include <string>

namespace implicit::python {
namespace {

using TransformerHandle = BuiltinEnergy<EnergyTransformer>;

struct TransformerMapHandle : MapHandle {
  Typed<EnergyTransformerMap> typed;
};

std::shared_ptr<TransformerHandle> MakeTransformer(
    Index num_tokens, Index token_dim, Index num_heads, Index head_dim, Index num_memories,
    const std::string& memory, double beta, double memory_beta, double gamma, double delta,
    double eps, bool exclude_self, bool learnable_layer_norm, unsigned seed,
    const py::object& init_stddev, const py::object& dtype) {
  EnergyTransformerOptions o;
  o.num_tokens = num_tokens;
  o.token_dim = token_dim;
  o.num_heads = num_heads;
  o.head_dim = head_dim;
  o.num_memories = num_memories;
  if (memory == "relu") {
    o.memory = EnergyTransformerMemory::kRelu;
  } else if (memory == "softmax") {
    o.memory = EnergyTransformerMemory::kSoftmax;
  } else {
    throw py::value_error("memory: '" + memory + "' is unknown (relu, softmax)");
  }
  o.beta = beta;
  o.memory_beta = memory_beta;
  o.gamma = gamma;
  o.delta = delta;
  o.eps = eps;
  o.exclude_self = exclude_self;
  o.learnable_layer_norm = learnable_layer_norm;
  return MakeBuiltinEnergy<EnergyTransformer>(
      "EnergyTransformer", ParseDtype(dtype, "dtype"), [&](auto scalar) {
        using Scalar = decltype(scalar);
        auto et = std::make_shared<EnergyTransformer<Scalar>>(o);  // validates the options
        et->Initialize(seed, init_stddev.is_none()
                                 ? 1.0 / std::sqrt(static_cast<double>(token_dim))
                                 : init_stddev.cast<double>());
        return et;
      });
}

std::shared_ptr<TransformerMapHandle> MakeTransformerMap(const py::object& et_object,
                                                         double step) {
  if (!py::isinstance<TransformerHandle>(et_object)) {
    throw py::type_error("energy: expected an implicit.EnergyTransformer");
  }
  TransformerHandle& et = et_object.cast<TransformerHandle&>();
  auto handle = std::make_shared<TransformerMapHandle>();
  handle->type_name = "EnergyTransformerMap";
  handle->keep_alive = et_object;
  Dispatch(et.dtype, [&](auto scalar) {
    using Scalar = decltype(scalar);
    auto map = std::make_shared<EnergyTransformerMap<Scalar>>(et.typed.get<Scalar>(),
                                                              Scalar(step));
    handle->typed.set<Scalar>(map);
    handle->set<Scalar>(std::move(map));
  });
  return handle;
}

}  // namespace

void BindEnergyTransformer(py::module_& m) {
  py::class_<TransformerHandle, EnergyHandle, std::shared_ptr<TransformerHandle>>(
      m, "EnergyTransformer",
      R"(The Energy Transformer block (Hoover et al., 2023) as one energy of the tokens.

A sample is one column of length num_tokens * token_dim: token A occupies
entries [A*D, (A+1)*D), i.e. a C-ordered (num_tokens, token_dim) array per sample.
E = E_LN + E_ATT (num_heads heads of width head_dim) + E_HN (num_memories
memories, "relu" or "softmax"). Parameters W_K, W_Q, Xi (and gamma, delta when
learnable_layer_norm) start as N(0, init_stddev^2) draws from `seed`
(init_stddev default 1/sqrt(token_dim)). descent_direction(x) is dE/dg, the
direction of the ET dynamics (EnergyTransformerMap).)")
      .def(py::init(&MakeTransformer), py::arg("num_tokens"), py::arg("token_dim"),
           py::arg("num_heads") = 1, py::arg("head_dim") = 0, py::arg("num_memories") = 0,
           py::arg("memory") = "relu", py::arg("beta") = 0.0, py::arg("memory_beta") = 1.0,
           py::arg("gamma") = 1.0, py::arg("delta") = 0.0, py::arg("eps") = 1e-5,
           py::arg("exclude_self") = true, py::arg("learnable_layer_norm") = false,
           py::arg("seed") = 0u, py::arg("init_stddev") = py::none(),
           py::arg("dtype") = "float64")
      .def_property_readonly("num_tokens",
                             [](const TransformerHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.typed.get<decltype(s)>().num_tokens();
                               });
                             })
      .def_property_readonly("token_dim",
                             [](const TransformerHandle& h) {
                               return Dispatch(h.dtype, [&](auto s) {
                                 return h.typed.get<decltype(s)>().token_dim();
                               });
                             })
      .def(
          "layer_norm",
          [](const TransformerHandle& h, const py::object& x) {
            return Dispatch(h.dtype, [&](auto s) {
              using Scalar = decltype(s);
              const EnergyTransformer<Scalar>& et = h.typed.get<Scalar>();
              auto xs = View<Scalar>(x, "x", et.dimension(), -1);
              Matrix<Scalar> g(xs.rows(), xs.cols());
              et.LayerNorm(xs, g);
              return MatrixToArray<Scalar>(g);
            });
          },
          py::arg("x"), "g = LayerNorm(x), token by token (same layout as x).");

  py::class_<TransformerMapHandle, MapHandle, std::shared_ptr<TransformerMapHandle>>(
      m, "EnergyTransformerMap",
      R"(The ET dynamics x -> x - step * dE/dg as a fixed-point map; set_clamp(free_mask,
values) holds the coordinates where free_mask is 0 at values (both n x B; image
completion). Keeps the EnergyTransformer alive.)")
      .def(py::init(&MakeTransformerMap), py::arg("energy"), py::arg("step") = 1.0)
      .def(
          "set_clamp",
          [](TransformerMapHandle& h, const py::object& free_mask, const py::object& values) {
            Dispatch(h.dtype, [&](auto s) {
              using Scalar = decltype(s);
              EnergyTransformerMap<Scalar>& map = h.typed.get<Scalar>();
              Matrix<Scalar> mask = View<Scalar>(free_mask, "free_mask", map.dimension(), -1);
              Matrix<Scalar> v = View<Scalar>(values, "values", map.dimension(), mask.cols());
              map.SetClamp(std::move(mask), std::move(v));
            });
          },
          py::arg("free_mask"), py::arg("values"))
      .def("clear_clamp", [](TransformerMapHandle& h) {
        Dispatch(h.dtype, [&](auto s) { h.typed.get<decltype(s)>().ClearClamp(); });
      });
}

}  // namespace implicit::python
