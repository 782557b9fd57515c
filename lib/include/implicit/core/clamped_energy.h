/// \file
/// ClampedEnergy: part of the state of any energy held at given values (image
/// completion, inpainting, conditioning on visible tokens). The free mask m
/// (1 = free, 0 = clamped, per coordinate and sample) and the clamped values c
/// are set per batch; the free coordinates follow the base energy with the
/// clamped ones as context, the clamped ones stay at c. The clamped values are
/// the energy's input, so the IFT gives the gradient with respect to them.
///
/// \code
///   implicit::ClampedEnergy<double> clamped(base);      // base: any Energy (n)
///   clamped.SetClamp(free_mask, values);                // both n x B
///   implicit::GradientStepMap<double> map(clamped, 0.1);  // then any solver,
///   implicit::PicardSolver<double>().Solve(map, x);       // x: n x B
/// \endcode
#pragma once

#include <implicit/core/cpu_dispatch.h>
#include <implicit/core/energy.h>
#include <implicit/core/types.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace implicit {

/// An Energy with part of its state clamped at given values, per coordinate and sample.
///
/// Clamps part of the state of any energy: with m the free mask (1 = free,
/// 0 = clamped, per coordinate and sample) and c the clamped values,
///
///   E_c(x; c) = E(y) + 0.5 |(1 - m) (.) (x - c)|^2,   y = m (.) x + (1 - m) (.) c
///   grad      = m (.) grad E(y) + (1 - m) (.) (x - c)
///   descent   = m (.) D(y)      + (1 - m) (.) (x - c)   (D: the base's direction)
///   hess v    = m (.) H(y) (m (.) v) + (1 - m) (.) v     (symmetric)
///
/// so clamped coordinates that start at c never move under the gradient flow
/// (and sit at c at every stationary point), the free ones follow the base
/// energy with the clamped ones as context, and the Hessian is the free block
/// plus the identity: the implicit backward pass through GradientStepMap works
/// whenever the base's free block is nonsingular. (Not so for the Energy
/// Transformer, whose energy is flat along per-token shifts: train it through
/// EnergyTransformerMap::SetClamp, which uses this class as its energy().) The clamped
/// values are the map's *input* (input_dimension() = n): InputVectorJacobianProduct
/// gives d/dc <grad, u> = (1 - m) (.) (H(y)(m (.) u) - u). Parameters are the
/// base's (parameters() forwards to it), with PVJP_c(x, u) = PVJP(y, m (.) u).
///
/// For the Energy Transformer's image completion: free = masked patches,
/// m = TokenMask(masked, D), c = the image with the visible patches.
/// Holds a reference: the base energy must outlive it.
template <typename Scalar>
class ClampedEnergy : public Energy<Scalar> {
 public:
  /// Wraps `base`, held by reference (it must outlive this energy); set the clamp with
  /// SetClamp() before use.
  explicit ClampedEnergy(Energy<Scalar>& base) : base_(base) {}

  /// Sets the free mask m and the clamped values c. free_mask and values: n x B (the batch this energy will be called with).
  /// Entries of free_mask must be 0 or 1.
  /// \throws std::invalid_argument when free_mask is not a batch of the base's dimension,
  ///         values has another shape, or an entry of free_mask is not 0 or 1.
  void SetClamp(Matrix<Scalar> free_mask, Matrix<Scalar> values);
  /// Replaces the clamped values only (same shape as before).
  /// \throws std::invalid_argument when values does not have the clamp's shape.
  void SetInput(Matrix<Scalar> values) {
    internal::CheckShape("ClampedEnergy::SetInput(values)", values, mask_.rows(), mask_.cols());
    values_ = std::move(values);
  }
  /// The free mask m set by SetClamp(), n x B (1 = free, 0 = clamped).
  const Matrix<Scalar>& free_mask() const { return mask_; }
  /// The clamped values c, n x B: the energy's input.
  const Matrix<Scalar>& input() const { return values_; }
  /// The wrapped base energy.
  Energy<Scalar>& base() const { return base_; }

  /// Checks that x is a batch of the clamp's shape (`what` names the caller in the message).
  /// \throws std::invalid_argument when x is not a batch of the clamp's shape.
  void Check(const char* what, ConstMatrixRef<Scalar> x) const;
  /// y = m (.) x + (1 - m) (.) c: the state the base energy sees.
  /// \throws std::invalid_argument when x is not a batch of the clamp's shape.
  Matrix<Scalar> Merge(ConstMatrixRef<Scalar> x) const {
    Check("ClampedEnergy(x)", x);
    return Merge(x, mask_, values_);
  }
  /// The same for a given mask and clamped values (x's shape).
  /// \throws std::invalid_argument when mask or clamped does not have x's shape.
  static Matrix<Scalar> Merge(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped) {
    CheckClamp("ClampedEnergy::Merge", x, mask, clamped);
    Matrix<Scalar> y(x.rows(), x.cols());
    if constexpr (kDispatched) {
      internal::ClampMergeKernel<Scalar>(x.rows(), x.cols(), mask.data(), mask.rows(), x.data(), x.outerStride(),
                                         clamped.data(), clamped.rows(), y.data(), y.rows());
    } else {
      y = (mask.array() * x.array() + (Scalar(1) - mask.array()) * clamped.array()).matrix();
    }
    return y;
  }

  Index dimension() const override { return base_.dimension(); }

  void Value(ConstMatrixRef<Scalar> x, VectorRef<Scalar> values) const override {
    Check("ClampedEnergy(x)", x);
    ValueWith(x, mask_, values_, values);
  }
  ///@{
  /// Value and DescentDirection for a compacted block x of the batch samples
  /// `columns` (ascending), with those samples' clamps (for maps' column
  /// evaluation, FixedPointMap::EvaluateColumns). The base energy must
  /// SupportsSubsets() (it sees the merged block).
  /// \throws std::logic_error when the base energy does not SupportsSubsets().
  /// \throws std::invalid_argument when x does not have the base's dimension or `columns` is
  ///         not one ascending index of the clamp's batch per column of x.
  void ValueColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                    VectorRef<Scalar> values) const {
    Matrix<Scalar> mask, clamped;
    GatherClamp("ClampedEnergy::ValueColumns", x, columns, &mask, &clamped);
    ValueWith(x, mask, clamped, values);
  }
  void DescentDirectionColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                               MatrixRef<Scalar> out) const {
    Matrix<Scalar> mask, clamped;
    GatherClamp("ClampedEnergy::DescentDirectionColumns", x, columns, &mask, &clamped);
    Vector<Scalar> no_values;
    DescentWith(x, mask, clamped, out, no_values);
  }
  /// Both at once (the base energy's DescentDirectionAndValue: one pass).
  void DescentDirectionColumnsAndValue(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                                       MatrixRef<Scalar> out, VectorRef<Scalar> values) const {
    Matrix<Scalar> mask, clamped;
    GatherClamp("ClampedEnergy::DescentDirectionColumnsAndValue", x, columns, &mask, &clamped);
    internal::CheckShape("ClampedEnergy::DescentDirectionColumnsAndValue(values)", values, x.cols(), 1);
    DescentWith(x, mask, clamped, out, values);
  }
  ///@}
  /// The free mask and clamped values of the samples `columns`, for a block x
  /// (checks x's dimension, the column indices, and that the base energy may
  /// see a block: SupportsSubsets()).
  /// \throws std::logic_error when the base energy does not SupportsSubsets().
  /// \throws std::invalid_argument when x does not have the base's dimension or `columns` is
  ///         not one ascending index of the clamp's batch per column of x.
  void GatherClamp(const char* what, ConstMatrixRef<Scalar> x, const std::vector<Index>& columns,
                   Matrix<Scalar>* mask, Matrix<Scalar>* clamped) const {
    if (!base_.SupportsSubsets()) {
      throw std::logic_error(std::string(what) +
                             ": the base energy has per-sample data (SupportsSubsets() is false), so "
                             "blocks of samples cannot be evaluated");
    }
    internal::CheckBatch(what, x, base_.dimension());
    internal::CheckColumns(what, columns, x.cols(), mask_.cols());
    internal::GatherColumns(mask_, columns, mask);
    internal::GatherColumns(values_, columns, clamped);
  }
  void Gradient(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad) const override {
    Check("ClampedEnergy(x)", x);
    Vector<Scalar> no_values;
    GradientWith(x, mask_, values_, grad, no_values);
  }
  void DescentDirection(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out) const override {
    Check("ClampedEnergy(x)", x);
    Vector<Scalar> no_values;
    DescentWith(x, mask_, values_, out, no_values);
  }
  void DescentDirectionAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                                VectorRef<Scalar> values) const override {
    Check("ClampedEnergy(x)", x);
    internal::CheckShape("ClampedEnergy::DescentDirectionAndValue(values)", values, x.cols(), 1);
    DescentWith(x, mask_, values_, out, values);
  }
  void GradientAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> grad,
                        VectorRef<Scalar> values) const override {
    Check("ClampedEnergy(x)", x);
    internal::CheckShape("ClampedEnergy::GradientAndValue(values)", values, x.cols(), 1);
    GradientWith(x, mask_, values_, grad, values);
  }
  void CccpUpdateAndValue(ConstMatrixRef<Scalar> x, MatrixRef<Scalar> out,
                          VectorRef<Scalar> values) const override {
    GradientAndValue(x, out, values);
    out = x - out;
  }
  /// The clamp (mask and values) is per sample: a subset of the batch is
  /// evaluated with its samples' clamps (GradientColumns), when the base
  /// energy supports subsets.
  bool SupportsSubsets() const override { return false; }
  bool SupportsColumnSubsets() const override { return base_.SupportsSubsets(); }
  void GradientColumns(ConstMatrixRef<Scalar> x, const std::vector<Index>& columns, MatrixRef<Scalar> grad,
                       VectorRef<Scalar> values) const override {
    Matrix<Scalar> mask, clamped;
    GatherClamp("ClampedEnergy::GradientColumns", x, columns, &mask, &clamped);
    internal::CheckOptionalValues("ClampedEnergy::GradientColumns(values)", values, x.cols());
    GradientWith(x, mask, clamped, grad, values);
  }
  void HessianVectorProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> v,
                            MatrixRef<Scalar> out) const override;

  Index num_parameters() const override { return base_.num_parameters(); }
  ParameterSet<Scalar>* parameters() override { return base_.parameters(); }
  void ParameterVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                      VectorRef<Scalar> out) const override {
    const Matrix<Scalar> y = Merge(x);
    internal::CheckShape("ClampedEnergy::ParameterVectorJacobianProduct(u)", u, x.rows(), x.cols());
    base_.ParameterVectorJacobianProduct(y, (mask_.array() * u.array()).matrix(), out);
  }
  Index input_dimension() const override { return base_.dimension(); }
  void InputVectorJacobianProduct(ConstMatrixRef<Scalar> x, ConstMatrixRef<Scalar> u,
                                  MatrixRef<Scalar> out) const override;

  /// values += 0.5 |(1 - m) (.) (x - c)|^2, the clamp's term of Value, for the
  /// free mask m and clamped values c of x's samples (a map that evaluates the
  /// base energy at the merged point itself adds it).
  /// \throws std::invalid_argument when mask or clamped does not have x's shape, or values
  ///         is not one number per column of x.
  static void AddPenalty(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                         VectorRef<Scalar> values) {
    internal::CheckShape("ClampedEnergy::AddPenalty(values)", values, x.cols(), 1);
    CombineAndAddPenalty(x, mask, clamped, nullptr, &values);
  }

 private:
  /// E(y) + 0.5 |(1 - m) (.) (x - c)|^2 with y = m (.) x + (1 - m) (.) c.
  void ValueWith(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                 VectorRef<Scalar> values) const {
    base_.Value(Merge(x, mask, clamped), values);
    AddPenalty(x, mask, clamped, values);
  }
  /// The gradient for the given clamps; the value too unless values is empty.
  void GradientWith(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                    MatrixRef<Scalar> grad, VectorRef<Scalar> values) const {
    AtMerged(&Energy<Scalar>::Gradient, &Energy<Scalar>::GradientAndValue, x, mask, clamped, grad, values);
  }
  /// The descent direction for the given clamps; the value too unless values is empty.
  void DescentWith(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                   MatrixRef<Scalar> out, VectorRef<Scalar> values) const {
    AtMerged(&Energy<Scalar>::DescentDirection, &Energy<Scalar>::DescentDirectionAndValue, x, mask, clamped, out,
             values);
  }
  /// The base energy's `alone` at y = m (.) x + (1 - m) (.) c into out (or
  /// `with_value`, the penalty added to values, unless values is empty), then
  /// combined with the clamps: what the gradient and the descent direction share.
  void AtMerged(void (Energy<Scalar>::*alone)(ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const,
                void (Energy<Scalar>::*with_value)(ConstMatrixRef<Scalar>, MatrixRef<Scalar>, VectorRef<Scalar>) const,
                ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask, const Matrix<Scalar>& clamped,
                MatrixRef<Scalar> out, VectorRef<Scalar> values) const {
    const Matrix<Scalar> y = Merge(x, mask, clamped);
    if (values.size() == 0) {
      (base_.*alone)(y, out);
    } else {
      (base_.*with_value)(y, out, values);
    }
    CombineAndAddPenalty(x, mask, clamped, &out, values.size() == 0 ? nullptr : &values);
  }
  static constexpr bool kDispatched = std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>;
  /// out <- m (.) out + (1 - m) (.) (x - c) unless out is null, and values +=
  /// 0.5 |(1 - m) (.) (x - c)|^2 (per column) unless values is null: one pass
  /// (internal::ClampCombineKernel) for float and double.
  static void CombineAndAddPenalty(ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask,
                                   const Matrix<Scalar>& clamped, MatrixRef<Scalar>* out, VectorRef<Scalar>* values) {
    CheckClamp("ClampedEnergy", x, mask, clamped);
    if (out != nullptr) internal::CheckShape("ClampedEnergy(out)", *out, x.rows(), x.cols());
    if constexpr (kDispatched) {
      internal::ClampCombineKernel<Scalar>(x.rows(), x.cols(), mask.data(), mask.rows(), x.data(), x.outerStride(),
                                           clamped.data(), clamped.rows(), out ? out->data() : nullptr,
                                           out ? out->outerStride() : 0, values ? values->data() : nullptr);
    } else {
      if (values != nullptr) {
        *values += Scalar(0.5) * ((Scalar(1) - mask.array()) * (x - clamped).array())
                                     .matrix().colwise().squaredNorm().transpose();
      }
      if (out != nullptr) {
        *out = (mask.array() * out->array() + (Scalar(1) - mask.array()) * (x - clamped).array()).matrix();
      }
    }
  }
  /// Checks that mask and clamped have x's shape (`what` names the caller).
  static void CheckClamp(const char* what, ConstMatrixRef<Scalar> x, const Matrix<Scalar>& mask,
                         const Matrix<Scalar>& clamped) {
    if (mask.rows() == x.rows() && mask.cols() == x.cols() && clamped.rows() == x.rows() &&
        clamped.cols() == x.cols()) {
      return;
    }
    internal::CheckShape((std::string(what) + "(free_mask)").c_str(), mask, x.rows(), x.cols());
    internal::CheckShape((std::string(what) + "(values)").c_str(), clamped, x.rows(), x.cols());
  }

  Energy<Scalar>& base_;
  Matrix<Scalar> mask_;
  Matrix<Scalar> values_;
};

template <typename Scalar>
void ClampedEnergy<Scalar>::SetClamp(Matrix<Scalar> free_mask, Matrix<Scalar> values) {
  internal::CheckBatch("ClampedEnergy::SetClamp(free_mask)", free_mask, base_.dimension());
  internal::CheckShape("ClampedEnergy::SetClamp(values)", values, free_mask.rows(),
                       free_mask.cols());
  if (!((free_mask.array() == Scalar(0)) || (free_mask.array() == Scalar(1))).all()) {
    throw std::invalid_argument("ClampedEnergy::SetClamp(free_mask): entries must be 0 or 1");
  }
  mask_ = std::move(free_mask);
  values_ = std::move(values);
}

template <typename Scalar>
void ClampedEnergy<Scalar>::HessianVectorProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> v,
    MatrixRef<Scalar> out) const {
  const Matrix<Scalar> y = Merge(x);
  internal::CheckShape("ClampedEnergy::HessianVectorProduct(v)", v, x.rows(), x.cols());
  const Matrix<Scalar> mv = (mask_.array() * v.array()).matrix();
  base_.HessianVectorProduct(y, mv, out);
  out = (mask_.array() * out.array() + (Scalar(1) - mask_.array()) * v.array()).matrix();
}

template <typename Scalar>
void ClampedEnergy<Scalar>::InputVectorJacobianProduct(
    ConstMatrixRef<Scalar> x,
    ConstMatrixRef<Scalar> u,
    MatrixRef<Scalar> out) const {
  const Matrix<Scalar> y = Merge(x);
  internal::CheckShape("ClampedEnergy::InputVectorJacobianProduct(u)", u, x.rows(), x.cols());
  internal::CheckShape("ClampedEnergy::InputVectorJacobianProduct(out)", out, x.rows(), x.cols());
  base_.HessianVectorProduct(y, (mask_.array() * u.array()).matrix(), out);
  out = ((Scalar(1) - mask_.array()) * (out.array() - u.array())).matrix();
}

template <typename Scalar>
void ClampedEnergy<Scalar>::Check(const char* what, ConstMatrixRef<Scalar> x) const {
  internal::CheckBatch(what, x, base_.dimension());
  if (mask_.cols() != x.cols() || mask_.rows() != x.rows()) {
    std::ostringstream s;
    s << what << ": the clamp (SetClamp) is " << mask_.rows() << "x" << mask_.cols()
      << " but the state is " << x.rows() << "x" << x.cols();
    throw std::invalid_argument(s.str());
  }
}

IMPLICIT_EXTERN_TEMPLATE_CLASS(ClampedEnergy);

}  // namespace implicit
