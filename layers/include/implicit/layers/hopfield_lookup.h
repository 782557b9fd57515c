/// \file
/// HopfieldLookup: a HopfieldLayer whose stored patterns are learned (block
/// "patterns", d_y x num_patterns) and looked up by the input queries R:
/// Z = Forward(R) is d_out x S. Options as HopfieldLayer's (hopfield_layer.h),
/// with learned_patterns = num_patterns (> 0).
///
/// \code
///   implicit::HopfieldLookup<double>::Options o;
///   o.query_dim = 8; o.pattern_dim = 8; o.learned_patterns = 16;
///   implicit::HopfieldLookup<double> lookup(o);
///   implicit::Matrix<double> Z = lookup.Forward(R);  // 8 x S
///   auto g = lookup.Backward(dLdZ);                  // d/dpatterns in g.parameters
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/layers/hopfield_layer.h>

namespace implicit {

/// A HopfieldLayer whose stored patterns are learned (block "patterns",
/// d_y x learned_patterns) and looked up by the input queries R.
template <typename Scalar>
class HopfieldLookup : public LearnedInputHopfieldLayer<Scalar> {
 public:
  /// The options, as HopfieldLayer's, with learned_patterns > 0.
  using Options = typename HopfieldLayer<Scalar>::Options;
  /// Builds the layer with learned_patterns stored patterns.
  /// \throws std::invalid_argument when the options are invalid, or unless
  ///   learned_patterns > 0 and learned_queries == 0.
  explicit HopfieldLookup(const Options& options)
      : LearnedInputHopfieldLayer<Scalar>(options, "HopfieldLookup", false) {}
  /// Z = lookup(R) (d_out x S) for the queries R (d_r x S); mask: additive
  /// score mask, N x 1 or N x S (0 or -inf, N = learned_patterns), empty for
  /// none.
  /// \throws std::invalid_argument when R has no columns or R or the mask have
  ///   the wrong shape.
  Matrix<Scalar> Forward(ConstMatrixRef<Scalar> R, const Matrix<Scalar>& mask = Matrix<Scalar>()) {
    return this->layer_.Forward(R, Matrix<Scalar>(), mask);
  }
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(HopfieldLookup);

}  // namespace implicit
