/// \file
/// First-order optimisers for the parameters of implicit layers: SGD (with
/// momentum) and Adam (with decoupled, AdamW-style weight decay).
///
/// An optimiser updates a `ParameterSet<S>` in place from a gradient vector of
/// the same size and layout (the vector an implicit backward pass returns).
/// Both optimisers clip the gradient by its global L2 norm first (when
/// clip_norm > 0), and both expose their state (step count and moment vectors)
/// as an OptimizerState so that checkpoints can save and restore it exactly.
///
/// \code
///   implicit::ParameterSet<double> params;  ... params.Add("W", 16, 16); ...
///   implicit::AdamOptimizer<double>::Options options;
///   options.learning_rate = 1e-3;
///   options.weight_decay = 1e-4;    // decoupled: theta -= lr * wd * theta
///   options.clip_norm = 1.0;        // clip |grad|_2 to 1 before the update
///   implicit::AdamOptimizer<double> adam(options);
///   for (...) {
///     implicit::Vector<double> grad = ...;          // dL/dtheta, params.size()
///     implicit::OptimizerStepInfo info = adam.Step(params, grad);
///   }
///   implicit::OptimizerState state = adam.state();  // for a checkpoint
/// \endcode
///
/// A gradient containing NaN or Inf is never applied: Step() leaves the
/// parameters and the optimiser state untouched and returns info.skipped=true.
/// Bad options and a gradient of the wrong size throw std::invalid_argument.
#pragma once

#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit {

/// The complete mutable state of an optimiser, in double precision (a float
/// optimiser's state widens exactly, so a save/restore round trip is exact).
struct OptimizerState {
  std::string type;                 ///< "sgd" or "adam"
  std::int64_t step = 0;            ///< number of updates applied so far
  std::vector<std::string> slot_names;   ///< e.g.\ {"velocity"} or {"m", "v"}
  std::vector<Vector<double>> slots;     ///< one vector per name, parameter layout
};

/// What one optimiser step did.
struct OptimizerStepInfo {
  double gradient_norm = 0.0;  ///< |grad|_2 before clipping
  double clip_scale = 1.0;     ///< factor the gradient was multiplied by (1: not clipped)
  double update_norm = 0.0;    ///< |theta_new - theta_old|_2
  bool skipped = false;        ///< gradient was not finite; nothing changed
};

/// Scales `gradient` in place so that its L2 norm is at most max_norm (no-op
/// when max_norm <= 0 or the norm is already within it).
/// \return the scale factor applied (1 when unchanged).
template <typename Scalar>
double ClipByGlobalNorm(VectorRef<Scalar> gradient, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0;
  const double norm = static_cast<double>(gradient.norm());
  if (!(norm > max_norm)) return 1.0;
  const double scale = max_norm / norm;
  gradient *= static_cast<Scalar>(scale);
  return scale;
}

/// The options every optimiser has (each optimiser's Options adds its own).
struct OptimizerOptions {
  /// Step size; finite and > 0 (default 1e-2; AdamOptimizer::Options sets 1e-3).
  double learning_rate = 1e-2;
  /// Weight decay coefficient >= 0 (SGD: an L2 term in the gradient; Adam:
  /// decoupled, theta -= lr * wd * theta); default 0, no decay.
  double weight_decay = 0.0;
  /// Clip the gradient to this global L2 norm before use; 0 (the default) = no clipping.
  double clip_norm = 0.0;

  /// Checks every field; on failure names the field in *error (when not null)
  /// and returns false.
  bool IsValid(std::string* error) const {
    const char* problem = nullptr;
    std::string field;
    double value = 0.0;
    if (!(learning_rate > 0.0) || !std::isfinite(learning_rate)) {
      problem = "must be finite and > 0", field = "learning_rate", value = learning_rate;
    } else if (!(weight_decay >= 0.0) || !std::isfinite(weight_decay)) {
      problem = "must be finite and >= 0", field = "weight_decay", value = weight_decay;
    } else if (!(clip_norm >= 0.0) || !std::isfinite(clip_norm)) {
      problem = "must be finite and >= 0", field = "clip_norm", value = clip_norm;
    }
    if (problem == nullptr) return true;
    if (error) *error = field + " " + problem + ", got " + std::to_string(value);
    return false;
  }
};

namespace internal {

/// `options` when valid; otherwise throws std::invalid_argument(`"<who>: ..."`).
template <typename Options>
const Options& ValidOptimizerOptions(const char* who, const Options& options) {
  std::string error;
  if (!options.IsValid(&error)) {
    throw std::invalid_argument(std::string(who) + ": invalid options: " + error);
  }
  return options;
}

/// The start of every Step(): checks the gradient's size and records its norm.
/// Returns false (info->skipped) for a non-finite gradient; otherwise *g is the
/// gradient clipped to clip_norm.
template <typename Scalar>
bool PrepareGradient(const char* who, Index num_parameters, ConstVectorRef<Scalar> gradient,
                     double clip_norm, OptimizerStepInfo* info, Vector<Scalar>* g) {
  if (num_parameters != gradient.size()) {
    std::ostringstream s;
    s << who << ": gradient has " << gradient.size() << " entries, the parameter set has "
      << num_parameters;
    throw std::invalid_argument(s.str());
  }
  info->gradient_norm = static_cast<double>(gradient.norm());
  if (!gradient.allFinite()) {
    info->skipped = true;
    return false;
  }
  *g = gradient;
  info->clip_scale = ClipByGlobalNorm<Scalar>(*g, clip_norm);
  return true;
}

/// The start of every SetState(): the state is of optimiser `type`.
inline void CheckStateType(const char* who, const OptimizerState& state, const char* type) {
  if (state.type != type) {
    throw std::invalid_argument(std::string(who) + ": state is for optimiser '" + state.type +
                                "'");
  }
  if (state.step < 0) throw std::invalid_argument(std::string(who) + ": negative step count");
}

/// Checks that slot i of `state` is named `name` and holds `size` finite values.
template <typename Scalar>
void CheckSlot(const char* who, const OptimizerState& state, std::size_t i,
               const std::string& name, Index size) {
  if (state.slot_names.size() != state.slots.size() || i >= state.slots.size() ||
      state.slot_names[i] != name) {
    throw std::invalid_argument(std::string(who) + ": state has no slot '" + name + "'");
  }
  if (state.slots[i].size() != size) {
    std::ostringstream s;
    s << who << ": state slot '" << name << "' has " << state.slots[i].size()
      << " entries, expected " << size;
    throw std::invalid_argument(s.str());
  }
  if (!state.slots[i].allFinite()) {
    throw std::invalid_argument(std::string(who) + ": state slot '" + name +
                                "' contains non-finite values");
  }
}

}  // namespace internal

/// Stochastic gradient descent with (heavy-ball) momentum:
/// \verbatim
///   g <- clip(grad) + weight_decay * theta        (coupled L2 decay)
///   v <- momentum * v + g
///   theta <- theta - learning_rate * v
/// \endverbatim
template <typename Scalar>
class SgdOptimizer {
 public:
  /// The options of SgdOptimizer: learning_rate (1e-2), weight_decay (an L2
  /// penalty: weight_decay * theta added to the clipped gradient, the gradient
  /// of 0.5 wd |theta|^2) and clip_norm, plus momentum.
  struct Options : OptimizerOptions {
    /// Heavy-ball momentum coefficient in [0, 1); 0 (the default) is plain SGD.
    double momentum = 0.0;

    /// Checks every field; on failure names the field in *error (when not
    /// null) and returns false.
    bool IsValid(std::string* error) const {
      if (!OptimizerOptions::IsValid(error)) return false;
      if (momentum >= 0.0 && momentum < 1.0) return true;
      if (error) *error = "momentum must be in [0, 1), got " + std::to_string(momentum);
      return false;
    }
  };

  /// An optimiser with no steps taken yet.
  /// \throws std::invalid_argument when the options are invalid.
  explicit SgdOptimizer(const Options& options = Options())
      : options_(internal::ValidOptimizerOptions("SgdOptimizer", options)) {}

  /// The options in use.
  const Options& options() const { return options_; }
  /// Changes the learning rate (e.g.\ for a schedule); must be finite and > 0.
  /// \throws std::invalid_argument when `lr` is not finite and > 0.
  void set_learning_rate(double lr) {
    Options o = options_;
    o.learning_rate = lr;
    options_ = internal::ValidOptimizerOptions("SgdOptimizer", o);
  }
  /// The number of updates applied so far (skipped steps do not count).
  std::int64_t step_count() const { return step_; }
  /// The momentum buffer v (empty before the first step).
  const Vector<Scalar>& velocity() const { return velocity_; }

  /// Applies one update to `params` from `gradient` (params.size() entries, the
  /// parameter layout); a non-finite gradient changes nothing (info.skipped).
  /// \return what the step did.
  /// \throws std::invalid_argument when the gradient's size is not params.size().
  OptimizerStepInfo Step(ParameterSet<Scalar>& params, ConstVectorRef<Scalar> gradient) {
    OptimizerStepInfo info;
    Vector<Scalar> g;
    if (!internal::PrepareGradient<Scalar>("SgdOptimizer::Step", params.size(), gradient,
                                           options_.clip_norm, &info, &g)) {
      return info;
    }
    if (velocity_.size() != params.size()) velocity_ = Vector<Scalar>::Zero(params.size());
    Vector<Scalar>& theta = params.values();
    if (options_.weight_decay > 0.0) g += static_cast<Scalar>(options_.weight_decay) * theta;
    const Scalar momentum = static_cast<Scalar>(options_.momentum);
    velocity_ = momentum * velocity_ + g;
    const Vector<Scalar> update = static_cast<Scalar>(options_.learning_rate) * velocity_;
    theta -= update;
    info.update_norm = static_cast<double>(update.norm());
    ++step_;
    return info;
  }

  /// The optimiser's state (type "sgd", the step count and the slot "velocity"),
  /// e.g.\ for a checkpoint.
  OptimizerState state() const {
    OptimizerState s;
    s.type = "sgd";
    s.step = step_;
    s.slot_names = {"velocity"};
    s.slots = {velocity_.template cast<double>()};
    return s;
  }
  /// Restores a state saved by state() for a parameter set of `num_parameters`
  /// entries.
  /// \throws std::invalid_argument naming the mismatch (another optimiser's
  ///   state, a negative step count, a missing, mis-sized or non-finite slot).
  void SetState(const OptimizerState& s, Index num_parameters) {
    internal::CheckStateType("SgdOptimizer::SetState", s, "sgd");
    // An optimiser that never stepped has an empty velocity.
    const Index size = s.slots.size() == 1 && s.slots[0].size() == 0 ? 0 : num_parameters;
    internal::CheckSlot<Scalar>("SgdOptimizer::SetState", s, 0, "velocity", size);
    velocity_ = s.slots[0].template cast<Scalar>();
    step_ = s.step;
  }

 private:
  Options options_;
  Vector<Scalar> velocity_;
  std::int64_t step_ = 0;
};

/// Adam with decoupled weight decay (AdamW, Loshchilov & Hutter):
/// \verbatim
///   g <- clip(grad)
///   m <- beta1 m + (1 - beta1) g,   v <- beta2 v + (1 - beta2) g^2
///   theta <- theta - lr * ( m_hat / (sqrt(v_hat) + eps) + weight_decay * theta )
/// \endverbatim
/// with bias corrections m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t).
/// The decay does not pass through the moment estimates: every parameter
/// shrinks by the factor (1 - lr * weight_decay) per step, independently of its
/// gradient history (unlike an L2 term added to the gradient).
template <typename Scalar>
class AdamOptimizer {
 public:
  /// The options of AdamOptimizer: learning_rate (here 1e-3), weight_decay
  /// (decoupled: theta -= lr * wd * theta) and clip_norm, plus beta1, beta2
  /// and epsilon.
  struct Options : OptimizerOptions {
    /// The defaults, with learning_rate 1e-3.
    Options() { learning_rate = 1e-3; }
    /// Decay rate of the first-moment (mean) estimate, in [0, 1); default 0.9.
    double beta1 = 0.9;
    /// Decay rate of the second-moment estimate, in [0, 1); default 0.999.
    double beta2 = 0.999;
    /// Added to sqrt(v_hat) in the denominator; finite and > 0; default 1e-8.
    double epsilon = 1e-8;

    /// Checks every field; on failure names the field in *error (when not
    /// null) and returns false.
    bool IsValid(std::string* error) const {
      auto fail = [error](const std::string& m) {
        if (error) *error = m;
        return false;
      };
      if (!OptimizerOptions::IsValid(error)) return false;
      if (!(beta1 >= 0.0 && beta1 < 1.0))
        return fail("beta1 must be in [0, 1), got " + std::to_string(beta1));
      if (!(beta2 >= 0.0 && beta2 < 1.0))
        return fail("beta2 must be in [0, 1), got " + std::to_string(beta2));
      if (!(epsilon > 0.0) || !std::isfinite(epsilon))
        return fail("epsilon must be finite and > 0, got " + std::to_string(epsilon));
      return true;
    }
  };

  /// An optimiser with no steps taken yet.
  /// \throws std::invalid_argument when the options are invalid.
  explicit AdamOptimizer(const Options& options = Options())
      : options_(internal::ValidOptimizerOptions("AdamOptimizer", options)) {}

  /// The options in use.
  const Options& options() const { return options_; }
  /// Changes the learning rate (e.g.\ for a schedule); must be finite and > 0.
  /// \throws std::invalid_argument when `lr` is not finite and > 0.
  void set_learning_rate(double lr) {
    Options o = options_;
    o.learning_rate = lr;
    options_ = internal::ValidOptimizerOptions("AdamOptimizer", o);
  }
  /// The number of updates applied so far, t in the bias corrections
  /// (skipped steps do not count).
  std::int64_t step_count() const { return step_; }
  /// The first-moment estimate m (empty before the first step).
  const Vector<Scalar>& first_moment() const { return m_; }
  /// The second-moment estimate v (empty before the first step).
  const Vector<Scalar>& second_moment() const { return v_; }

  /// Applies one update to `params` from `gradient` (params.size() entries, the
  /// parameter layout); a non-finite gradient changes nothing (info.skipped).
  /// \return what the step did.
  /// \throws std::invalid_argument when the gradient's size is not params.size().
  OptimizerStepInfo Step(ParameterSet<Scalar>& params, ConstVectorRef<Scalar> gradient) {
    OptimizerStepInfo info;
    Vector<Scalar> g;
    if (!internal::PrepareGradient<Scalar>("AdamOptimizer::Step", params.size(), gradient,
                                           options_.clip_norm, &info, &g)) {
      return info;
    }
    const Index n = params.size();
    if (m_.size() != n) {
      m_ = Vector<Scalar>::Zero(n);
      v_ = Vector<Scalar>::Zero(n);
    }
    const Scalar b1 = static_cast<Scalar>(options_.beta1);
    const Scalar b2 = static_cast<Scalar>(options_.beta2);
    m_ = b1 * m_ + (Scalar(1) - b1) * g;
    v_ = b2 * v_ + ((Scalar(1) - b2) * g.array().square()).matrix();
    ++step_;
    const double t = static_cast<double>(step_);
    const Scalar c1 = static_cast<Scalar>(1.0 - std::pow(options_.beta1, t));
    const Scalar c2 = static_cast<Scalar>(1.0 - std::pow(options_.beta2, t));
    const Scalar lr = static_cast<Scalar>(options_.learning_rate);
    const Scalar eps = static_cast<Scalar>(options_.epsilon);
    Vector<Scalar>& theta = params.values();
    Vector<Scalar> update =
        lr * ((m_.array() / c1) / ((v_.array() / c2).sqrt() + eps)).matrix();
    if (options_.weight_decay > 0.0)
      update += (lr * static_cast<Scalar>(options_.weight_decay)) * theta;
    theta -= update;
    info.update_norm = static_cast<double>(update.norm());
    return info;
  }

  /// The optimiser's state (type "adam", the step count and the slots "m"
  /// and "v"), e.g.\ for a checkpoint.
  OptimizerState state() const {
    OptimizerState s;
    s.type = "adam";
    s.step = step_;
    s.slot_names = {"m", "v"};
    s.slots = {m_.template cast<double>(), v_.template cast<double>()};
    return s;
  }
  /// Restores a state saved by state() for a parameter set of `num_parameters`
  /// entries.
  /// \throws std::invalid_argument naming the mismatch (another optimiser's
  ///   state, a negative step count, a missing, mis-sized or non-finite slot,
  ///   negative entries in v).
  void SetState(const OptimizerState& s, Index num_parameters) {
    internal::CheckStateType("AdamOptimizer::SetState", s, "adam");
    const Index size = s.slots.size() == 2 && s.slots[0].size() == 0 ? 0 : num_parameters;
    internal::CheckSlot<Scalar>("AdamOptimizer::SetState", s, 0, "m", size);
    internal::CheckSlot<Scalar>("AdamOptimizer::SetState", s, 1, "v", size);
    if ((s.slots[1].array() < 0.0).any())
      throw std::invalid_argument("AdamOptimizer::SetState: second moment 'v' has negative entries");
    m_ = s.slots[0].template cast<Scalar>();
    v_ = s.slots[1].template cast<Scalar>();
    step_ = s.step;
  }

 private:
  Options options_;
  Vector<Scalar> m_, v_;
  std::int64_t step_ = 0;
};

}  // namespace implicit
