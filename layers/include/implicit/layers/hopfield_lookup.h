// HopfieldLookup: a HopfieldLayer whose stored patterns are learned (block
// "patterns", d_y x num_patterns) and looked up by the input queries R:
// Z = Forward(R) is d_out x S. Options as HopfieldLayer's (hopfield_layer.h),
// with learned_patterns = num_patterns (> 0).
//
//   implicit::HopfieldLookup<double>::Options o;
//   o.query_dim = 8; o.pattern_dim = 8; o.learned_patterns = 16;
//   implicit::HopfieldLookup<double> lookup(o);
//   implicit::Matrix<double> Z = lookup.Forward(R);  // 8 x S
//   auto g = lookup.Backward(dLdZ);                  // d/dpatterns in g.parameters
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/hopfield_layer.h>

namespace implicit {

template <typename Scalar>
class HopfieldLookup : public LearnedInputHopfieldLayer<Scalar> {
 public:
  using Options = typename HopfieldLayer<Scalar>::Options;
  explicit HopfieldLookup(const Options& options)
      : LearnedInputHopfieldLayer<Scalar>(options, "HopfieldLookup", false) {}
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> R, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return this->layer_.Forward(R, Matrix<Scalar>(), mask);
  }
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLookup);

}  // namespace implicit
