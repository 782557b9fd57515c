/// \file
/// HopfieldPooling: a HopfieldLayer whose queries are learned (block
/// "queries", d_r x num_queries) and retrieve from the input set Y, so that
/// Z = Forward(Y) (d_out x num_queries) is a fixed-size summary of a set of any
/// size N. Options as HopfieldLayer's (hopfield_layer.h), with
/// learned_queries = num_queries (> 0).
///
/// \code
///   implicit::HopfieldPooling<double>::Options o;
///   o.query_dim = 8; o.pattern_dim = 8; o.learned_queries = 2;
///   implicit::HopfieldPooling<double> pool(o);
///   implicit::Matrix<double> Z = pool.Forward(Y);   // 8 x 2, any N = Y.cols()
///   auto g = pool.Backward(dLdZ);                   // d/dqueries in g.parameters
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/hopfield_layer.h>

namespace implicit {

/// A HopfieldLayer whose queries are learned (block "queries", d_r x
/// learned_queries) and retrieve from the input set Y: a fixed-size summary
/// (d_out x learned_queries) of a set of any size N.
template <typename Scalar>
class HopfieldPooling : public LearnedInputHopfieldLayer<Scalar> {
 public:
  /// The options, as HopfieldLayer's, with learned_queries > 0.
  using Options = typename HopfieldLayer<Scalar>::Options;
  /// Builds the layer with learned_queries queries.
  /// \throws std::invalid_argument when the options are invalid, or unless
  ///   learned_queries > 0 and learned_patterns == 0.
  explicit HopfieldPooling(const Options& options)
      : LearnedInputHopfieldLayer<Scalar>(options, "HopfieldPooling", true) {}
  /// Z = pool(Y) (d_out x learned_queries) for the set Y (d_y x N, any N);
  /// mask: additive score mask, N x 1 or N x learned_queries (0 or -inf),
  /// empty for none.
  /// \throws std::invalid_argument when Y is empty or Y or the mask have the
  ///   wrong shape.
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> Y, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return this->layer_.Forward(Matrix<Scalar>(), Y, mask);
  }
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldPooling);

}  // namespace implicit
