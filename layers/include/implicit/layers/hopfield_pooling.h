// HopfieldPooling: a HopfieldLayer whose queries are learned (block
// "queries", d_r x num_queries) and retrieve from the input set Y, so that
// Z = Forward(Y) (d_out x num_queries) is a fixed-size summary of a set of any
// size N. Options as HopfieldLayer's (hopfield_layer.h), with
// learned_queries = num_queries (> 0).
//
//   implicit::HopfieldPooling<double>::Options o;
//   o.query_dim = 8; o.pattern_dim = 8; o.learned_queries = 2;
//   implicit::HopfieldPooling<double> pool(o);
//   implicit::Matrix<double> Z = pool.Forward(Y);   // 8 x 2, any N = Y.cols()
//   auto g = pool.Backward(dLdZ);                   // d/dqueries in g.parameters
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/hopfield_layer.h>

namespace implicit {

template <typename Scalar>
class HopfieldPooling : public LearnedInputHopfieldLayer<Scalar> {
 public:
  using Options = typename HopfieldLayer<Scalar>::Options;
  explicit HopfieldPooling(const Options& options)
      : LearnedInputHopfieldLayer<Scalar>(options, "HopfieldPooling", true) {}
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> Y, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return this->layer_.Forward(Matrix<Scalar>(), Y, mask);
  }
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldPooling);

}  // namespace implicit
