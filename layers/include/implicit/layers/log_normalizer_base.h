/// \file
/// LogNormalizerBase: what every log-normaliser of the family (log_normalizer.h)
/// shares. A log-normaliser log Z(eta) is an Energy\<S\> only as a scalar
/// function of the query eta (Value log Z, Gradient the attention output), not
/// an energy to minimise: its "CCCP step" is meaningless, so CccpUpdate throws
/// std::logic_error naming the class and pointing to LogNormalizerEnergy and
/// ResidualLogNormalizerMap. It also owns the parameter set of the trainable
/// blocks (keys, mean, covariance) and exposes it to the optimisers.
///
/// \code
///   template <typename Scalar>
///   class MyLogNormalizer : public implicit::LogNormalizerBase<Scalar> {
///    public:
///     MyLogNormalizer() : implicit::LogNormalizerBase<Scalar>("MyLogNormalizer") {}
///     ...  // dimension, Value, Gradient, HessianVectorProduct, parameter VJP
///   };
/// \endcode
#pragma once

#include <implicit/core/energy.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <stdexcept>
#include <string>

namespace implicit {

/// The base of the log-normalisers: an Energy only as a scalar function log Z
/// of the query, whose CccpUpdate throws, and the owner of the trainable
/// blocks.
template <typename Scalar>
class LogNormalizerBase : public Energy<Scalar> {
 public:
  /// Not an energy to minimise: the "CCCP step" of log Z is meaningless; use
  /// LogNormalizerEnergy or ResidualLogNormalizerMap.
  /// \throws std::logic_error always, naming the class.
  void CccpUpdate(ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const override {
    throw std::logic_error(std::string(name_) +
                           " is a log-normaliser, not an energy: wrap it in "
                           "LogNormalizerEnergy or ResidualLogNormalizerMap");
  }

  Index num_parameters() const override { return params_.size(); }
  ParameterSet<Scalar>* parameters() override { return params_.size() > 0 ? &params_ : nullptr; }
  /// The trainable blocks (keys, mean, covariance); empty when nothing is
  /// learned.
  const ParameterSet<Scalar>& parameter_set() const { return params_; }

 protected:
  /// Starts with no trainable block. name: the class, for the error messages
  /// (a string literal, which must outlive the object).
  explicit LogNormalizerBase(const char* name) : name_(name) {}

  /// The trainable blocks; empty when nothing is learned.
  ParameterSet<Scalar> params_;

 private:
  const char* name_;
};

IMPLICIT_EXTERN_TEMPLATE_CLASS(LogNormalizerBase);

}  // namespace implicit
