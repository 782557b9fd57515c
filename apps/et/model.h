// implicit-et's model: the Energy Transformer on 16 patch tokens + a class
// token (EtModel: embeddings, the clamped equilibrium or unrolled dynamics,
// the decoder, and their backward passes), the random patch masks, and one
// model's gradients and predictions on a batch.
#pragma once

#include "et/config.h"
#include "et/device_equilibrium.h"
#include "problems/problem.h"

#include <implicit/core/parameters.h>
#include <implicit/layers/energy_transformer.h>
#include <implicit/layers/layer_norm.h>
#include <implicit/solvers/solver.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {

// What one training step reports.
struct StepStats {
  double loss = 0;
  int forward_converged = 0, backward_failed = 0, forward_iterations = 0, backward_products = 0;
  double equilibrium_seconds = 0;  // the forward solve and the IFT backward pass (wall clock)
};

// Per-token LayerNorm g = gamma (x - mean) / sqrt(var + eps) + delta and its
// backward, matching EnergyTransformer::LayerNorm.
class EtModel {
 public:
  explicit EtModel(const Config& c);

  implicit::ParameterSet<double>& params() { return params_; }
  implicit::ParameterSet<double>& energy_params() { return *et_.parameters(); }
  const implicit::EnergyTransformerMap<double>& map() const { return map_; }
  // The GPU's name with --device cuda, else "".
  std::string device_name() const { return device_ ? device_->device_name() : std::string(); }
  Index dimension() const { return kTokens * config_.dim; }

  // Sets up the clamp for patches (64 x B) and a patch mask (16 x B, 1 =
  // masked). Visible tokens (E_A p + e + P_A) and the class token are clamped.
  // A masked token starts at the learned mask token plus its position
  // embedding P_A; its first D - pos_dim coordinates are free and its last
  // pos_dim coordinates stay clamped there, so that it keeps knowing where it
  // is (with every coordinate free, the masked tokens of a digit are
  // interchangeable under the energy and all settle at the same point).
  void Prepare(const Matrix<double>& patches, const Matrix<double>& patch_mask);

  // The equilibrium of the ET dynamics z <- z - a dE/dg (free coordinates)
  // from the clamped values. The solver object is kept from one call to the
  // next while c's solver, tolerance and iteration budget stay the same, so a
  // training run's solves reuse its buffers (docs/solvers.md).
  implicit::Summary Equilibrium(const Config& c, Matrix<double>* z);
  // The IFT backward pass at the equilibrium z (Equilibrium's last result) for
  // dL/dz = dz: the energy's parameter gradient into *ge (left unchanged when
  // not finite) and dL/dstart, whose failed samples' columns are zero (they
  // are dropped, and counted in *st).
  Matrix<double> Backward(const Config& c, const Matrix<double>& z, const Matrix<double>& dz, StepStats* st,
                          Vector<double>* ge);
  // T steps of the same dynamics from the starting state; trajectory kept.
  void Unrolled(std::vector<Matrix<double>>* trajectory) const;

  // g = LN(token A + 1 of sample b), with its normalised ghat and scale s.
  void NormalizeToken(const Matrix<double>& z, Index b, Index A, Vector<double>* g,
                      Vector<double>* ghat, Vector<double>* s) const;
  // Decoded patches (64 x B) of the state z: patch A is a linear map of
  // LayerNorm(z_{A+1}).
  Matrix<double> Decode(const Matrix<double>& z) const;
  // dL/dz given dL/dpatches = dp; adds the decoder's gradient into grad.
  Matrix<double> DecodeBackward(const Matrix<double>& z, const Matrix<double>& dp,
                                implicit::Vector<double>* grad);
  // Gradients of the starting state (embedding, position, class and mask
  // tokens) from dL/dstart = dc.
  void InputBackward(const Matrix<double>& dc, Vector<double>* grad);

 private:
  static implicit::EnergyTransformer<double>::Options EtOptions(const Config& c);
  Config config_;
  implicit::EnergyTransformer<double> et_;
  implicit::EnergyTransformerMap<double> map_;
  implicit::ParameterSet<double> params_;
  implicit::ColumnLayerNorm<double> ln_;
  Matrix<double> start_, patches_, patch_mask_;
  std::unique_ptr<DeviceEquilibrium> device_;  // --device cuda
  // Equilibrium's solver, made for this solver name, tolerance and budget.
  std::unique_ptr<implicit::Solver<double>> solver_;
  std::string solver_name_;
  double solver_tol_ = 0;
  long solver_max_iter_ = 0;
};

// 16 x B patch masks with exactly k ones per column.
Matrix<double> RandomMasks(Index B, long k, std::mt19937& gen);
// The 64 x B pixel mask of a 16 x B patch mask.
Matrix<double> PixelMask(const Matrix<double>& patch_mask);

// One training step's gradients (model, energy) on a batch; returns the loss.
StepStats Gradients(EtModel& model, const Config& c, const Matrix<double>& patches,
                    const Matrix<double>& patch_mask, Vector<double>* gm, Vector<double>* ge);

// Model predictions (64 x B patches) for the given digits and masks.
Matrix<double> Predict(EtModel& model, const Config& c, const Matrix<double>& patches,
                       const Matrix<double>& patch_mask, implicit::Summary* summary);

// The masked mean squared error of `pred` against `target` (mask 1 = counted).
double MaskedMse(const Matrix<double>& pred, const Matrix<double>& target, const Matrix<double>& mask);

}  // namespace implicit_apps
