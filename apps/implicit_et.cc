// implicit-et: trains an Energy Transformer on masked digit completion,
// through its equilibrium (implicit differentiation) or by unrolling.
//
// Model. An 8x8 digit (x/8 - 1) is cut into 16 patches of 2x2 pixels. Token 0
// is a learned class token, tokens 1..16 the patches: a visible patch p at
// position A gives the token E_A p + e + P_A (learned per-position embedding
// E_A, bias e, position embedding P_A); a masked patch starts at a learned mask
// token m + P_A. Visible tokens and the class token are clamped; of a masked
// token the first D - pos_dim coordinates are free and the last pos_dim stay at
// m + P_A, so it keeps its position. The free coordinates move to an
// equilibrium of the Energy Transformer energy (EnergyTransformer, softmax
// memory), found by a forward solver on the ET dynamics z <- z - a dE/dg
// (EnergyTransformerMap). Each patch is decoded by LayerNorm + a per-position
// linear map; the loss is the MSE on the masked pixels. Adam, learning rate
// with a cosine decay to 10%; the energy's own parameters get a smaller rate
// (--energy-lr).
//
// Each batch is shared out over --threads copies of the model (Workers): the
// samples are independent, so the combined gradient is exactly the batch's.
// While the shares run, Eigen's own (OpenMP) threads are off, so that the
// cores are not oversubscribed. Under `mpirun -np K` (a build with MPI) each
// rank takes a shard of every batch first and the ranks sum their gradients
// (data parallel; the global batch stays --batch); every rank then takes the
// same Adam step, and only rank 0 prints and writes the checkpoint, image and
// JSON. A checkpoint resumes with any number of ranks. The held-out digits are
// predicted the same way: each rank its shard, over its threads, then gathered.
//
// Gradients: --mode implicit (default) uses implicit::ImplicitBackward at the
// equilibrium (adjoint (I - J)^T u = dL/dz of the dynamics map, GMRES): memory
// independent of the forward iterations. --mode unroll instead runs
// --unroll-steps steps of the same dynamics and backpropagates through all of
// them (the model is then that truncated dynamics, also at test time).
//
// --device cuda (a CUDA build and a GPU) runs the equilibrium solve and the
// IFT backward pass of the whole batch on the GPU (et/device_equilibrium.h:
// device picard or anderson forward, device Anderson adjoint); the embeddings,
// the decoder, the loss and Adam stay on the CPU, one process, one thread.
//
//   implicit-et                                 # default run, a few minutes on 2 cores
//   implicit-et --steps 50 --json et.json --image et.png
//   implicit-et --resume implicit-et.ckpt --steps 400
//   mpirun -np 2 implicit-et --steps 50            # the same run over two processes
//   implicit-et --device cuda --batch 1024 --solver anderson   # solves on the GPU
#include "common/cli.h"
#include "common/data_paths.h"
#include "common/digit_patches.h"
#include "common/format.h"
#include "common/json_output.h"
#include "common/output_files.h"
#include "common/png.h"
#include "common/progress.h"
#include "common/ranks.h"
#include "common/solvers.h"
#include "common/table.h"
#include "common/threads.h"
#include "common/timing.h"
#include "et/device_equilibrium.h"
#include "problems/problem.h"

#include <implicit/core/checkpoint.h>
#include <implicit/core/digits.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/core/losses.h>
#include <implicit/core/optimizers.h>
#include <implicit/layers/energy_transformer.h>
#include <implicit/layers/entmax.h>
#include <implicit/layers/layer_norm.h>
#include <implicit/solvers/sharded_solve.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace implicit_apps {
namespace {

const char* kDescription = R"(Trains an Energy Transformer on masked digit completion (16 patch tokens + a class
token; random patches masked; MSE on masked pixels) and compares the held-out masked
MSE with mean fill and one-step Hopfield completion on the same masks.)";

constexpr Index kPatches = 16, kTokens = 17, kPatchSize = 4;
// Initial scale of the position embeddings: large enough that the clamped
// position coordinates of a masked token dominate its LayerNorm at the start.
constexpr double kPositionScale = 3.0;

struct Config {
  long check_gradients = 0;
  long threads = std::max(1L, std::min(64L, static_cast<long>(std::thread::hardware_concurrency())));
  bool threads_given = false;  // --threads on the command line (else shared out over MPI ranks)
  long steps = 4000, batch = 32, masked = 8, unroll_steps = 20, dim = 32, heads = 8, head_dim = 8,
       memories = 32, pos_dim = 8, max_iter = 200, holdout = 297, seed = 1, checkpoint_every = 100;
  double backward_tol = 1e-8;
  double lr = 0.02, energy_lr = 0.005, tol = 1e-6, step = 0.5;
  bool unroll = false, quiet = false;
  std::string device = "cpu";
  std::string solver = "broyden", checkpoint = "implicit-et.ckpt", resume, image = "implicit-et.png",
              json, data;
  // What a checkpoint must match besides ConfigKey: the training digits
  // (count and a hash of their pixels), set once they are loaded.
  std::string data_key;
};

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
  explicit EtModel(const Config& c) : config_(c), et_(EtOptions(c)), map_(et_, c.step) {
    et_.Initialize(static_cast<unsigned>(c.seed), 0.5 / std::sqrt(static_cast<double>(c.dim)));
    if (c.device == "cuda") device_ = std::make_unique<DeviceEquilibrium>(et_, c.step);
    const Index D = c.dim;
    params_.Add("embed", D, kPatchSize * kPatches);  // one D x 4 embedding per patch position
    params_.Add("embed_bias", D, 1);
    params_.Add("position", D, kTokens);
    params_.Add("class", D, 1);
    params_.Add("mask_token", D, 1);
    params_.Add("decode", kPatches * kPatchSize, D);  // one 4 x D decoder per patch position
    params_.Add("decode_bias", kPatches * kPatchSize, 1);
    std::mt19937 gen(static_cast<unsigned>(c.seed) + 17u);
    params_.Block("embed") = RandomGaussian(D, kPatchSize * kPatches, 1.0, gen);
    params_.Block("position") = RandomGaussian(D, kTokens, kPositionScale, gen);
    params_.Block("class") = RandomGaussian(D, 1, 1.0, gen);
    params_.Block("mask_token") = RandomGaussian(D, 1, 1.0, gen);
    params_.Block("decode") = RandomGaussian(kPatches * kPatchSize, D, 0.1, gen);
    ln_.gamma = et_.gamma();
    ln_.delta = et_.delta();
    ln_.epsilon = et_.options().eps;
  }

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
  void Prepare(const Matrix<double>& patches, const Matrix<double>& patch_mask) {
    const Index D = config_.dim, B = patches.cols(), F = D - config_.pos_dim;
    Matrix<double> c(dimension(), B), free_mask = Matrix<double>::Zero(dimension(), B);
    const auto embed = params_.Block("embed");
    const Vector<double> bias = params_.Block("embed_bias");
    const Vector<double> mask_token = params_.Block("mask_token");
    const auto position = params_.Block("position");
    for (Index b = 0; b < B; ++b) {
      c.col(b).segment(0, D) = params_.Block("class") + position.col(0);
      for (Index A = 0; A < kPatches; ++A) {
        auto token = c.col(b).segment((A + 1) * D, D);
        token = position.col(A + 1);
        if (patch_mask(A, b) > 0.5) {
          token += mask_token;
          free_mask.col(b).segment((A + 1) * D, F).setOnes();
        } else {
          token += embed.middleCols(kPatchSize * A, kPatchSize) *
                       patches.col(b).segment(kPatchSize * A, kPatchSize) + bias;
        }
      }
    }
    map_.SetClamp(free_mask, c);
    if (device_) {  // the energy's parameters may have changed since the last batch
      device_->SyncParameters();
      device_->SetClamp(free_mask, c);
    }
    start_ = std::move(c);
    patches_ = patches;
    patch_mask_ = patch_mask;
  }

  // The equilibrium of the ET dynamics z <- z - a dE/dg (free coordinates)
  // from the clamped values.
  implicit::Summary Equilibrium(const Config& c, Matrix<double>* z) const {
    *z = start_;
    implicit::SolverOptions o;
    o.absolute_tolerance = c.tol;
    o.max_iterations = static_cast<int>(c.max_iter);
    // Residual-only safeguards. On the trained ET the map's step descends E
    // only for small enough steps, and the energy guard then shortens the safe
    // step: measured on the test's small model (400 steps of batch 16,
    // --max-iter 60), 5684 of 6400 training solves ended unconverged with the
    // guard and none without it (broyden; anderson and lbfgs alike).
    o.use_energy = false;
    if (device_) return device_->Solve(c.solver, o, z);
    return MakeSolver(c.solver, o)->Solve(map_, *z);
  }
  // The IFT backward pass at the equilibrium z (Equilibrium's last result) for
  // dL/dz = dz: the energy's parameter gradient into *ge (left unchanged when
  // not finite) and dL/dstart, whose failed samples' columns are zero (they
  // are dropped, and counted in *st).
  Matrix<double> Backward(const Config& c, const Matrix<double>& z, const Matrix<double>& dz, StepStats* st,
                          Vector<double>* ge) {
    implicit::BackwardOptions bo;
    bo.tolerance = c.backward_tol;
    bo.max_iterations = 300;
    bo.failed_samples = implicit::FailedSamplePolicy::kSkip;
    Matrix<double> dc;
    Vector<double> dtheta;
    if (device_) {
      bo.linear_solver = "anderson";
      DeviceEquilibrium::Gradients back = device_->Backward(dz, bo);
      st->backward_products = back.summary.function_evaluations;
      st->backward_failed = back.summary.num_samples() - back.summary.num_converged();
      dc = std::move(back.inputs);
      dtheta = std::move(back.parameters);
    } else {
      bo.linear_solver = "gmres";
      implicit::BackwardResult<double> back = implicit::ImplicitBackward<double>(map_, z, dz, bo);
      st->backward_products = back.summary.jacobian_products;
      st->backward_failed = back.summary.num_samples() - back.summary.num_converged();
      dc = std::move(back.input_gradient);
      dtheta = std::move(back.parameter_gradient);
    }
    for (Index b = 0; b < dc.cols(); ++b)
      if (!dc.col(b).allFinite()) dc.col(b).setZero();
    if (dtheta.allFinite()) *ge = dtheta;
    return dc;
  }
  // T steps of the same dynamics from the starting state; trajectory kept.
  void Unrolled(std::vector<Matrix<double>>* trajectory) const {
    trajectory->assign(1, start_);
    for (long t = 0; t < config_.unroll_steps; ++t) {
      Matrix<double> next(dimension(), start_.cols());
      map_.Evaluate(trajectory->back(), next);
      trajectory->push_back(std::move(next));
    }
  }

  // g = LN(token A + 1 of sample b), with its normalised ghat and scale s.
  void NormalizeToken(const Matrix<double>& z, Index b, Index A, Vector<double>* g,
                      Vector<double>* ghat, Vector<double>* s) const {
    const Index D = config_.dim;
    ln_.Normalize(z.col(b).segment((A + 1) * D, D), *ghat, *s);
    *g = (ln_.gamma * ghat->array() + ln_.delta).matrix();
  }
  // Decoded patches (64 x B) of the state z: patch A is a linear map of
  // LayerNorm(z_{A+1}).
  Matrix<double> Decode(const Matrix<double>& z) const {
    const Index D = config_.dim, B = z.cols();
    Matrix<double> out(kPatches * kPatchSize, B);
    Vector<double> g(D), ghat(D), s(1);
    for (Index b = 0; b < B; ++b)
      for (Index A = 0; A < kPatches; ++A) {
        NormalizeToken(z, b, A, &g, &ghat, &s);
        out.col(b).segment(kPatchSize * A, kPatchSize) =
            params_.Block("decode").middleRows(kPatchSize * A, kPatchSize) * g +
            params_.Block("decode_bias").middleRows(kPatchSize * A, kPatchSize);
      }
    return out;
  }
  // dL/dz given dL/dpatches = dp; adds the decoder's gradient into grad.
  Matrix<double> DecodeBackward(const Matrix<double>& z, const Matrix<double>& dp,
                                implicit::Vector<double>* grad) {
    const Index D = config_.dim, B = z.cols();
    Matrix<double> dz = Matrix<double>::Zero(z.rows(), B);
    Vector<double> g(D), ghat(D), s(1), w(D), dx(D);
    auto dW = params_.BlockOf(*grad, "decode");
    auto db = params_.BlockOf(*grad, "decode_bias");
    const auto W = params_.Block("decode");
    for (Index b = 0; b < B; ++b)
      for (Index A = 0; A < kPatches; ++A) {
        const Vector<double> d = dp.col(b).segment(kPatchSize * A, kPatchSize);
        if (d.isZero(0)) continue;
        NormalizeToken(z, b, A, &g, &ghat, &s);
        dW.middleRows(kPatchSize * A, kPatchSize) += d * g.transpose();
        db.middleRows(kPatchSize * A, kPatchSize) += d;
        // dL/dx = J^T w = J w (LayerNorm's Jacobian is symmetric), w = dL/dg.
        w = W.middleRows(kPatchSize * A, kPatchSize).transpose() * d;
        implicit::ColumnLayerNorm<double>::JacobianProductAt(ghat, s, ln_.gamma, w, dx);
        dz.col(b).segment((A + 1) * D, D) = dx;
      }
    return dz;
  }
  // Gradients of the starting state (embedding, position, class and mask
  // tokens) from dL/dstart = dc.
  void InputBackward(const Matrix<double>& dc, Vector<double>* grad) {
    const Index D = config_.dim;
    auto dmask = params_.BlockOf(*grad, "mask_token");
    auto dE = params_.BlockOf(*grad, "embed");
    auto de = params_.BlockOf(*grad, "embed_bias");
    auto dP = params_.BlockOf(*grad, "position");
    auto dcls = params_.BlockOf(*grad, "class");
    for (Index b = 0; b < dc.cols(); ++b) {
      dcls += dc.col(b).segment(0, D);
      dP.col(0) += dc.col(b).segment(0, D);
      for (Index A = 0; A < kPatches; ++A) {
        const Vector<double> d = dc.col(b).segment((A + 1) * D, D);
        dP.col(A + 1) += d;
        if (patch_mask_(A, b) < 0.5) {
          dE.middleCols(kPatchSize * A, kPatchSize) +=
              d * patches_.col(b).segment(kPatchSize * A, kPatchSize).transpose();
          de += d;
        } else {
          dmask += d;
        }
      }
    }
  }

 private:
  static implicit::EnergyTransformer<double>::Options EtOptions(const Config& c) {
    implicit::EnergyTransformer<double>::Options o;
    o.num_tokens = kTokens;
    o.token_dim = c.dim;
    o.num_heads = c.heads;
    o.head_dim = c.head_dim;
    o.num_memories = c.memories;
    o.memory = implicit::EnergyTransformerMemory::kSoftmax;
    return o;
  }
  Config config_;
  implicit::EnergyTransformer<double> et_;
  implicit::EnergyTransformerMap<double> map_;
  implicit::ParameterSet<double> params_;
  implicit::ColumnLayerNorm<double> ln_;
  Matrix<double> start_, patches_, patch_mask_;
  std::unique_ptr<DeviceEquilibrium> device_;  // --device cuda
};

// 16 x B patch masks with exactly k ones per column.
Matrix<double> RandomMasks(Index B, long k, std::mt19937& gen) {
  Matrix<double> m = Matrix<double>::Zero(kPatches, B);
  std::vector<Index> idx(kPatches);
  for (Index b = 0; b < B; ++b) {
    std::iota(idx.begin(), idx.end(), Index(0));
    std::shuffle(idx.begin(), idx.end(), gen);
    for (long j = 0; j < k; ++j) m(idx[j], b) = 1.0;
  }
  return m;
}
Matrix<double> PixelMask(const Matrix<double>& patch_mask) {
  Matrix<double> m(kPatches * kPatchSize, patch_mask.cols());
  for (Index b = 0; b < patch_mask.cols(); ++b)
    for (Index A = 0; A < kPatches; ++A) m.col(b).segment(kPatchSize * A, kPatchSize).setConstant(patch_mask(A, b));
  return m;
}

// One training step's gradients (model, energy) on a batch; returns the loss.
StepStats Gradients(EtModel& model, const Config& c, const Matrix<double>& patches,
                    const Matrix<double>& patch_mask, Vector<double>* gm, Vector<double>* ge) {
  StepStats st;
  model.Prepare(patches, patch_mask);
  const Matrix<double> pixel_mask = PixelMask(patch_mask);
  gm->setZero(model.params().size());
  ge->setZero(model.energy_params().size());
  Matrix<double> dp;
  if (!c.unroll) {
    Matrix<double> z;
    const auto t0 = std::chrono::steady_clock::now();
    const implicit::Summary fwd = model.Equilibrium(c, &z);
    const auto t1 = std::chrono::steady_clock::now();
    st.forward_converged = fwd.num_converged();
    st.forward_iterations = fwd.iterations;
    const Matrix<double> pred = model.Decode(z);
    st.loss = implicit::MaskedMeanSquaredError<double>(pred, patches, pixel_mask, &dp);
    const Matrix<double> dz = model.DecodeBackward(z, dp, gm);
    const auto t2 = std::chrono::steady_clock::now();
    const Matrix<double> dc = model.Backward(c, z, dz, &st, ge);
    st.equilibrium_seconds = std::chrono::duration<double>(t1 - t0 + (std::chrono::steady_clock::now() - t2)).count();
    model.InputBackward(dc, gm);
  } else {
    std::vector<Matrix<double>> traj;
    model.Unrolled(&traj);
    const Matrix<double>& z = traj.back();
    st.forward_iterations = static_cast<int>(c.unroll_steps);
    const Matrix<double> pred = model.Decode(z);
    st.loss = implicit::MaskedMeanSquaredError<double>(pred, patches, pixel_mask, &dp);
    Matrix<double> a = model.DecodeBackward(z, dp, gm);
    const implicit::EnergyTransformerMap<double>& map = model.map();
    Matrix<double> dc = Matrix<double>::Zero(a.rows(), a.cols()), tmp(a.rows(), a.cols());
    Vector<double> gp(ge->size());
    for (long t = c.unroll_steps - 1; t >= 0; --t) {
      const Matrix<double>& zt = traj[static_cast<std::size_t>(t)];
      map.ParameterVectorJacobianProduct(zt, a, gp);
      *ge += gp;
      map.InputVectorJacobianProduct(zt, a, tmp);
      dc += tmp;
      map.VectorJacobianProduct(zt, a, tmp);
      a = tmp;
      st.backward_products += 3;
    }
    dc += a;  // z_0 = the starting state
    model.InputBackward(dc, gm);
    st.forward_converged = static_cast<int>(patches.cols());
  }
  return st;
}

// Model predictions (64 x B patches) for the given digits and masks.
Matrix<double> Predict(EtModel& model, const Config& c, const Matrix<double>& patches,
                       const Matrix<double>& patch_mask, implicit::Summary* summary) {
  model.Prepare(patches, patch_mask);
  if (!c.unroll) {
    Matrix<double> z;
    *summary = model.Equilibrium(c, &z);
    return model.Decode(z);
  }
  std::vector<Matrix<double>> traj;
  model.Unrolled(&traj);
  return model.Decode(traj.back());
}

// The batch split over identical copies of the model, one per thread: each
// copy computes the gradients of its share of the digits (the samples are
// independent), and the shares are combined with weights proportional to their
// masked pixels, which gives exactly the gradient of the whole batch's loss.
// main() is the model that is trained; Sync() copies its parameters to the
// others after each update. An exception in any share is rethrown once all
// threads have finished.
class Workers {
 public:
  Workers(const Config& c, long threads) {
    for (long t = 0; t < threads; ++t) models_.push_back(std::make_unique<EtModel>(c));
  }
  EtModel& main() { return *models_.front(); }
  void Sync() {
    for (std::size_t t = 1; t < models_.size(); ++t) {
      models_[t]->params().values() = main().params().values();
      models_[t]->energy_params().values() = main().energy_params().values();
    }
  }
  // Under MPI each rank takes its shard of the batch (ShardOf) and shares it
  // out over its threads; the weighted sums are then summed over the ranks.
  StepStats Gradients(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                      const implicit::Communicator& comm, Vector<double>* gm, Vector<double>* ge) {
    const implicit::Shard mine = implicit::ShardOf(patches.cols(), comm);
    const Index B = mine.count, T = std::min<Index>(static_cast<Index>(models_.size()), B);
    std::vector<StepStats> stats(static_cast<std::size_t>(T));
    std::vector<Vector<double>> gms(stats.size()), ges(stats.size());
    std::vector<double> weight(stats.size());
    auto share = [&](long t) {
      const Index begin = mine.begin + B * t / T, end = mine.begin + B * (t + 1) / T;
      const std::size_t i = static_cast<std::size_t>(t);
      weight[i] = patch_mask.middleCols(begin, end - begin).sum();
      stats[i] = implicit_apps::Gradients(*models_[i], c, patches.middleCols(begin, end - begin),
                                          patch_mask.middleCols(begin, end - begin), &gms[i], &ges[i]);
    };
    OnEveryRank(comm, [&] { RunOnThreads(static_cast<long>(T), share); });
    // Sums weighted by masked pixels over this rank's shares, then over the ranks:
    // [w gm, w ge, w loss, w, forward converged, backward failed, backward products].
    const Index nm = main().params().size(), ne = main().energy_params().size();
    Vector<double> sums = Vector<double>::Zero(nm + ne + 5);
    double forward_iterations = 0, equilibrium_seconds = 0;
    for (std::size_t i = 0; i < stats.size(); ++i) {
      sums.head(nm) += weight[i] * gms[i];
      sums.segment(nm, ne) += weight[i] * ges[i];
      sums.tail(5) += Eigen::Matrix<double, 5, 1>(weight[i] * stats[i].loss, weight[i],
                                                  static_cast<double>(stats[i].forward_converged),
                                                  static_cast<double>(stats[i].backward_failed),
                                                  static_cast<double>(stats[i].backward_products));
      forward_iterations = std::max(forward_iterations, static_cast<double>(stats[i].forward_iterations));
      equilibrium_seconds = std::max(equilibrium_seconds, stats[i].equilibrium_seconds);
    }
    implicit::SumOverRanks(comm, sums);
    comm.MaxInPlace(&forward_iterations, 1);
    comm.MaxInPlace(&equilibrium_seconds, 1);
    const double total = sums(nm + ne + 1);
    *gm = sums.head(nm) / total;
    *ge = sums.segment(nm, ne) / total;
    StepStats st;
    st.loss = sums(nm + ne) / total;
    st.forward_converged = static_cast<decltype(st.forward_converged)>(sums(nm + ne + 2));
    st.backward_failed = static_cast<decltype(st.backward_failed)>(sums(nm + ne + 3));
    st.backward_products = static_cast<decltype(st.backward_products)>(sums(nm + ne + 4));
    st.forward_iterations = static_cast<decltype(st.forward_iterations)>(forward_iterations);
    st.equilibrium_seconds = equilibrium_seconds;  // the slowest share's
    return st;
  }

  // Predictions for `patches` (the same on every rank): this rank's shard of
  // them (ShardOf) split over its threads' copies of the model; every rank
  // receives all predictions and the Summary of the equilibrium solves merged
  // in sample order (MergeShardSummaries, GatherShardSummaries; none when
  // unrolling).
  Matrix<double> Predict(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                         const implicit::Communicator& comm, implicit::Summary* summary) {
    const implicit::Shard mine = implicit::ShardOf(patches.cols(), comm);
    const Index B = mine.count, T = std::min<Index>(static_cast<Index>(models_.size()), B);
    std::vector<Matrix<double>> predictions(static_cast<std::size_t>(T));
    std::vector<implicit::Summary> summaries(predictions.size());
    OnEveryRank(comm, [&] {
      RunOnThreads(static_cast<long>(T), [&](long t) {
        const Index begin = mine.begin + B * t / T, end = mine.begin + B * (t + 1) / T;
        const std::size_t i = static_cast<std::size_t>(t);
        predictions[i] = implicit_apps::Predict(*models_[i], c, patches.middleCols(begin, end - begin),
                                                patch_mask.middleCols(begin, end - begin), &summaries[i]);
      });
    });
    std::vector<double> local, all;
    for (const Matrix<double>& p : predictions) local.insert(local.end(), p.data(), p.data() + p.size());
    comm.AllGather(local, &all);
    if (!c.unroll) {
      const implicit::Summary merged = implicit::MergeShardSummaries(summaries, "");
      *summary = implicit::GatherShardSummaries(merged, patches.cols(), comm);
    }
    return Eigen::Map<const Matrix<double>>(all.data(), kPatches * kPatchSize, patches.cols());
  }

 private:
  std::vector<std::unique_ptr<EtModel>> models_;
};

double MaskedMse(const Matrix<double>& pred, const Matrix<double>& target, const Matrix<double>& mask) {
  return implicit::MaskedMeanSquaredError<double>(pred, target, mask);
}

// One-step Hopfield completion: memories X (64 x N patch layout), visible
// pixels only in the scores.
Matrix<double> HopfieldComplete(const Matrix<double>& X, const Matrix<double>& queries,
                                const Matrix<double>& pixel_mask, double beta) {
  const Matrix<double> visible = ((1.0 - pixel_mask.array()) * queries.array()).matrix();
  Matrix<double> scores = beta * (X.transpose() * visible);
  Matrix<double> p(scores.rows(), scores.cols());
  implicit::entmax::Softmax<double>(scores, p);
  return X * p;
}

void WriteGrid(const std::string& path, const std::vector<Matrix<double>>& rows_patches,
               const Matrix<double>& patch_mask) {
  // rows: original, masked, ET, Hopfield; columns: digits. Each digit 8x8 -> 48x48.
  const int scale = 6, pad = 4, cols = static_cast<int>(patch_mask.cols());
  const int nrows = static_cast<int>(rows_patches.size());
  const int W = cols * (8 * scale + pad) + pad, H = nrows * (8 * scale + pad) + pad;
  std::vector<unsigned char> img(static_cast<std::size_t>(W) * H, 255);
  for (int r = 0; r < nrows; ++r) {
    const Matrix<double> digits = PatchesToDigits(rows_patches[static_cast<std::size_t>(r)]);
    for (int b = 0; b < cols; ++b)
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) {
          const int A = (i / 2) * 4 + j / 2;
          double v = (digits(8 * i + j, b) + 1.0) / 2.0;  // [-1, 1] -> [0, 1]
          v = std::min(1.0, std::max(0.0, v));
          unsigned char px = static_cast<unsigned char>(std::lround(255.0 * (1.0 - v)));
          if (r == 1 && patch_mask(A, b) > 0.5) px = 160;  // masked: gray
          for (int y = 0; y < scale; ++y)
            for (int x = 0; x < scale; ++x) {
              const int X = pad + b * (8 * scale + pad) + j * scale + x;
              const int Y = pad + r * (8 * scale + pad) + i * scale + y;
              img[static_cast<std::size_t>(Y) * W + X] = px;
            }
        }
  }
  WriteGrayPng(path, W, H, img);
}

// Learning-rate factor at `step` of `steps`: cosine from 1 down to 0.1.
double CosineDecay(long step, long steps) {
  const double frac = static_cast<double>(step) / static_cast<double>(std::max<long>(steps, 1));
  return 0.1 + 0.45 * (1.0 + std::cos(3.141592653589793 * frac));
}

std::string ConfigKey(const Config& c) {
  return "dim=" + std::to_string(c.dim) + " heads=" + std::to_string(c.heads) + " head_dim=" +
         std::to_string(c.head_dim) + " memories=" + std::to_string(c.memories) + " pos_dim=" + std::to_string(c.pos_dim) + " mode=" +
         (c.unroll ? "unroll" : "implicit");
}

// UsageError when the model's copies (one per --threads) and its gradient and
// Adam state would take more than 2 GB, naming the option that weighs most.
void CheckModelSize(const Config& c) {
  const double D = static_cast<double>(c.dim), attention = 2.0 * static_cast<double>(c.heads * c.head_dim) * D,
               memories = static_cast<double>(c.memories) * D;
  const double parameters = attention + memories + D * (kPatchSize * kPatches + 1 + kTokens + 4) +
                            kPatches * kPatchSize * (D + 1);
  const double bytes = 8.0 * parameters * static_cast<double>(c.threads + 4);
  if (bytes <= 2e9) return;
  const std::string option = memories >= attention ? "--memories" : "--heads";
  throw UsageError(option + ": " + Fmt(parameters, 3) + " parameters in " + std::to_string(c.threads) +
                   " copies (--threads) would take " + Fmt(bytes * 1e-9, 3) + " GB (at most 2 GB)");
}

// The command line into `c`; false when it asked for --help.
bool ParseConfig(int argc, char** argv, Config* c) {
  CLI::App app(kDescription, "implicit-et");
  ConfigureApp(app);
  app.add_option("--steps", c->steps, "training steps (Adam updates) in total")->check(IntIn(0, 1000000));
  app.add_option("--batch", c->batch, "training digits per step")->check(IntIn(1, 4096));
  app.add_option("--lr", c->lr, "Adam learning rate of embeddings and decoder")->check(Positive());
  app.add_option("--energy-lr", c->energy_lr,
                 "Adam learning rate of the energy's parameters; both decay by a\n"
                 "cosine schedule to 10% over --steps")
      ->check(Positive());
  app.add_option("--masked", c->masked, "patches masked per digit")->check(IntIn(1, kPatches - 1));
  std::string mode = "implicit";
  CLI::Option* mode_option =
      app.add_option("--mode", mode, "implicit (gradients at the equilibrium) or unroll")
          ->check(CLI::IsMember({"implicit", "unroll"}));
  CLI::Option* unroll_flag = app.add_flag("--unroll", "same as --mode unroll");
  app.add_option("--unroll-steps", c->unroll_steps, "steps of the dynamics unrolled in --mode unroll")
      ->check(IntIn(1, 10000));
  app.add_option("--dim", c->dim, "token dimension")->check(IntIn(2, 512));
  app.add_option("--heads", c->heads, "attention heads")->check(IntIn(0, 64));
  app.add_option("--head-dim", c->head_dim, "dimension of each head")->check(IntIn(1, 512));
  app.add_option("--memories", c->memories, "Hopfield memories of the energy")->check(IntIn(0, 100000));
  app.add_option("--pos-dim", c->pos_dim, "coordinates of a masked token kept at its position code (< --dim)")
      ->check(IntIn(0, 511));
  app.add_option("--step", c->step, "step A of the ET dynamics z <- z - A dE/dg")
      ->check(RealCheck([](double a) { return a > 0 && a <= 1; }, "in (0, 1]"));
  CLI::Option* solver_option =
      app.add_option("--solver", c->solver, "forward solver on the ET dynamics (default anderson with --device cuda)")
          ->check(SolverNameCheck());
  app.add_option("--device", c->device,
                 "cpu, or cuda: the equilibrium solves and IFT backward passes on the GPU\n"
                 "(a CUDA build; --solver picard or anderson; one process, one thread)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--tol", c->tol, "forward tolerance |f(z) - z|")->check(Positive());
  app.add_option("--max-iter", c->max_iter, "forward iteration budget")->check(IntIn(1, 1000000));
  app.add_option("--holdout", c->holdout, "held-out digits, the last N of the file")->check(IntIn(1, 1000000));
  app.add_option("--seed", c->seed, "initialisation, batches and masks")->check(IntIn(0, 4294967295L));
  app.add_option("--checkpoint", c->checkpoint, "where checkpoints go")->check(PathCheck());
  app.add_option("--checkpoint-every", c->checkpoint_every, "save every N steps (0 = only at the end)")
      ->check(IntIn(0, 1000000000));
  app.add_option("--resume", c->resume,
                 "continue from a checkpoint (same model options and data); one at or\n"
                 "past --steps (the total) leaves nothing to train")
      ->check(PathCheck());
  app.add_option("--image", c->image, "PNG grid original / masked / ET / Hopfield")->check(ExtensionCheck({".png"}));
  app.add_option("--json", c->json, "write the results as JSON")->check(PathCheck());
  app.add_option("--data", c->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  app.add_option("--check-gradients", c->check_gradients,
                 "compare N gradient entries with central finite differences of the\n"
                 "loss on one batch, print the errors and exit")
      ->check(IntIn(0, 10000));
  CLI::Option* threads_option =
      app.add_option("--threads", c->threads,
                     "threads that share each batch (default: the number of cores, divided\n"
                     "among the ranks under mpirun); results agree to rounding whatever the number")
          ->check(IntIn(1, 64));
  app.add_flag("--quiet", c->quiet, "no progress bar");
  if (!Parse(app, argc, argv)) return false;
  c->threads_given = threads_option->count() > 0;
  Require(!(unroll_flag->count() > 0 && mode_option->count() > 0 && mode == "implicit"),
          "--unroll: contradicts --mode implicit");
  c->unroll = unroll_flag->count() > 0 || mode == "unroll";
  if (c->device == "cuda") {
    Require(!c->unroll, "--device cuda: --mode unroll is not on the device (only implicit gradients)");
    Require(!c->threads_given || c->threads == 1, "--threads: --device cuda trains in one thread");
    c->threads = 1;
    if (solver_option->count() == 0) c->solver = "anderson";
    Require(c->solver == "picard" || c->solver == "anderson",
            "--solver: the device solvers (--device cuda) are picard and anderson, got " + c->solver);
  }
  Require(c->pos_dim < c->dim, "--pos-dim: must be in 0..dim-1, got " + std::to_string(c->pos_dim));
  CheckModelSize(*c);
  if (c->check_gradients > 0) return true;  // writes no file
  CheckWritable(c->checkpoint, "--checkpoint", true);
  CheckWritable(c->image, "--image");
  CheckWritable(c->json, "--json");
  CheckDistinctFiles({{"--checkpoint", c->checkpoint}, {"--image", c->image}, {"--json", c->json}},
                     {{"--data", c->data}});
  CheckDistinctFiles({{"--image", c->image}, {"--json", c->json}}, {{"--resume", c->resume}});
  return true;
}

// The two Adam optimisers (embeddings and decoder; the energy's parameters),
// with the cosine decay of both learning rates.
struct Optimizers {
  explicit Optimizers(const Config& c)
      : model(Adam(c.lr)), energy(Adam(c.energy_lr)), lr(c.lr), energy_lr(c.energy_lr) {}
  static implicit::AdamOptimizer<double>::Options Adam(double learning_rate) {
    implicit::AdamOptimizer<double>::Options o;
    o.learning_rate = learning_rate;
    o.clip_norm = 1.0;
    return o;
  }
  void Decay(double factor) {
    model.set_learning_rate(lr * factor);
    energy.set_learning_rate(energy_lr * factor);
  }
  implicit::AdamOptimizer<double> model, energy;
  double lr, energy_lr;
};

// The first "key=value" of `a` that differs in `b`, as "key=A there, key=B here".
std::string FirstDifference(const std::string& there, const std::string& here) {
  std::istringstream a(there), b(here);
  std::string x, y;
  while (a >> x) {
    if (!(b >> y)) return x + " there, nothing here";
    if (x != y) return x + " there, " + y + " here";
  }
  return b >> y ? "nothing there, " + y + " here" : "";
}

// A checkpoint's metadata `key` against this run's `value`: throws naming
// the difference. `required`: a checkpoint without it is another program's.
void RequireSame(const implicit::Checkpoint& ck, const std::string& key, const std::string& value, bool required,
                 const std::string& path) {
  const auto it = ck.metadata.find(key);
  if (it == ck.metadata.end()) {
    if (required)
      throw std::runtime_error("--resume: checkpoint '" + path + "' was written by another program (no " + key +
                               "), this run uses " + value);
    return;  // written before the key was recorded
  }
  if (it->second != value)
    throw std::runtime_error("--resume: checkpoint '" + path + "' was written for a different " + key + ": " +
                             FirstDifference(it->second, value) + " (checkpoint: " + it->second +
                             "; this run: " + value + ")");
}

// The training losses a run reports, kept in its checkpoints so that a
// resumed run reports what the uninterrupted one would: the first step's and
// the latest step's (first < 0: no step yet). Stored exactly (hex floats).
struct TrainingLosses {
  double first = -1, last = 0;
};
void StoreLosses(const TrainingLosses& losses, implicit::Checkpoint* ck) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", losses.first);
  ck->metadata["first_train_loss"] = text;
  std::snprintf(text, sizeof text, "%a", losses.last);
  ck->metadata["last_train_loss"] = text;
}
TrainingLosses RestoreLosses(const implicit::Checkpoint& ck) {
  TrainingLosses losses;
  const auto first = ck.metadata.find("first_train_loss"), last = ck.metadata.find("last_train_loss");
  if (first != ck.metadata.end()) losses.first = std::strtod(first->second.c_str(), nullptr);
  if (last != ck.metadata.end()) losses.last = std::strtod(last->second.c_str(), nullptr);
  return losses;
}

// Restores parameters, optimiser state and the losses so far (*losses) from
// --resume; returns the step it was saved at.
long Resume(const Config& c, Workers& workers, Optimizers& adam, TrainingLosses* losses) {
  EtModel& model = workers.main();
  implicit::Checkpoint ck;
  try {
    ck = implicit::LoadCheckpoint(c.resume);
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + std::string(e.what()));
  }
  RequireSame(ck, "config", ConfigKey(c), true, c.resume);
  RequireSame(ck, "precision", "double", false, c.resume);
  RequireSame(ck, "data", c.data_key, false, c.resume);
  if (ck.step < 0 || ck.step > 1000000)
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "' has an invalid step " + std::to_string(ck.step));
  try {
    ck.RestoreParameters("model", &model.params());
    ck.RestoreParameters("energy", &model.energy_params());
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "': " + e.what());
  }
  if (!model.params().values().allFinite() || !model.energy_params().values().allFinite())
    throw std::runtime_error("--resume: checkpoint '" + c.resume +
                             "' holds parameters that are not finite (inf or nan); resume from an earlier one");
  try {
    adam.model.SetState(ck.Optimizer("adam_model"), model.params().size());
    adam.energy.SetState(ck.Optimizer("adam_energy"), model.energy_params().size());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "': optimiser state does not fit: " + e.what());
  }
  workers.Sync();
  *losses = RestoreLosses(ck);
  if (!c.quiet) std::cerr << "resumed from " << c.resume << " at step " << ck.step << "\n";
  return static_cast<long>(ck.step);
}

// Writes the checkpoint of `step` (only finite parameters are ever written)
// with the losses of the steps up to it.
void Save(const Config& c, long step, EtModel& model, const Optimizers& adam, const TrainingLosses& losses) {
  if (!model.params().values().allFinite() || !model.energy_params().values().allFinite())
    throw std::runtime_error("--checkpoint: not writing '" + c.checkpoint + "' at step " + std::to_string(step) +
                             ": the parameters are not finite");
  implicit::Checkpoint ck;
  ck.step = step;
  ck.metadata["program"] = "implicit-et";
  ck.metadata["config"] = ConfigKey(c);
  ck.metadata["precision"] = "double";
  ck.metadata["data"] = c.data_key;
  ck.AddParameters("model", model.params());
  ck.AddParameters("energy", model.energy_params());
  ck.AddOptimizer("adam_model", adam.model.state());
  ck.AddOptimizer("adam_energy", adam.energy.state());
  StoreLosses(losses, &ck);
  try {
    implicit::SaveCheckpoint(c.checkpoint, ck);
  } catch (const std::exception& e) {
    throw std::runtime_error("--checkpoint: " + std::string(e.what()));
  }
}

// --check-gradients: `count` gradient entries, every parameter block in turn
// (model blocks, then the energy's), a random entry of it each time, against
// central differences of `loss`. Prints a table; returns the largest error.
double CompareWithFiniteDifferences(EtModel& model, long count, const Vector<double>& gm, const Vector<double>& ge,
                                    const std::function<double()>& loss, std::mt19937& gen) {
  struct Block {
    bool energy;
    implicit::ParameterSet<double>::Entry entry;
  };
  std::vector<Block> blocks;
  for (const auto& e : model.params().entries()) blocks.push_back({false, e});
  for (const auto& e : model.energy_params().entries()) blocks.push_back({true, e});
  Table t({"parameter", "index", "gradient", "finite difference", "abs error"}, {false, true, true, true, true});
  double worst = 0;
  for (long k = 0; k < count; ++k) {
    const Block& blk = blocks[static_cast<std::size_t>(k) % blocks.size()];
    Vector<double>& values = blk.energy ? model.energy_params().values() : model.params().values();
    const Vector<double>& grad = blk.energy ? ge : gm;
    std::uniform_int_distribution<Index> idx(0, blk.entry.size() - 1);
    const Index i = blk.entry.offset + idx(gen);
    const double h = 1e-5, v = values(i);
    values(i) = v + h;
    const double lp = loss();
    values(i) = v - h;
    const double lm = loss();
    values(i) = v;
    const double fd = (lp - lm) / (2 * h);
    worst = std::max(worst, std::abs(fd - grad(i)));
    t.AddRow({blk.entry.name, std::to_string(i - blk.entry.offset), Fmt(grad(i), 6), Fmt(fd, 6),
              Fmt(std::abs(fd - grad(i)), 2)});
  }
  t.Print(std::cout);
  return worst;
}

// --check-gradients on a few training digits, with tight solves.
int CheckGradients(const Config& c, EtModel& model, const Matrix<double>& train) {
  std::mt19937 gen(static_cast<unsigned>(c.seed) + 99u);
  const Index B = std::min<long>(c.batch, 8);
  const Matrix<double> batch = train.leftCols(B);
  const Matrix<double> masks = RandomMasks(B, c.masked, gen);
  Config tight = c;
  tight.tol = 1e-11;
  tight.max_iter = 5000;
  tight.solver = "picard";  // the ET dynamics themselves: reaches 1e-11 reliably
  tight.backward_tol = 1e-10;
  Vector<double> gm, ge;
  const StepStats st = Gradients(model, tight, batch, masks, &gm, &ge);
  std::cout << "gradient check on " << B << " digits: forward converged " << st.forward_converged << "/" << B
            << " (" << st.forward_iterations << " iterations), backward failed " << st.backward_failed << " ("
            << st.backward_products << " products)\n";
  auto loss = [&]() {
    implicit::Summary s;
    return MaskedMse(Predict(model, tight, batch, masks, &s), batch, PixelMask(masks));
  };
  const double worst = CompareWithFiniteDifferences(model, c.check_gradients, gm, ge, loss, gen);
  std::cout << "largest abs error " << Fmt(worst, 3) << "\n";
  return 0;
}

struct TrainStats {
  TrainingLosses losses;  // of every step trained so far, resumed ones included
  double seconds = 0;
  // Per step trained in this run: its wall-clock time, and of it the forward
  // solve and IFT backward pass (the slowest share's).
  std::vector<double> step_seconds, equilibrium_seconds;
  long backward_failures = 0, forward_unconverged = 0;
  long saved_step = -1;  // the last checkpoint this run wrote (-1: none)
  // > 0: the step whose loss or gradient was not finite (training stopped
  // there, with the parameters of the step before), and why.
  long diverged_at_step = 0;
  std::string divergence;
  long kept_step = 0;  // then: the parameters kept are those after this many steps
};

// What is on disk at --checkpoint for the message of a failed run.
std::string CheckpointState(const Config& c, const TrainStats& ts, long start_step) {
  if (ts.saved_step >= 0)
    return "the last good checkpoint '" + c.checkpoint + "' (step " + std::to_string(ts.saved_step) + ") is kept";
  if (SameFile(c.checkpoint, c.resume))
    return "checkpoint '" + c.checkpoint + "' (step " + std::to_string(start_step) + ") is kept unchanged";
  return "no checkpoint was written ('" + c.checkpoint + "' is unchanged)";
}

// Training steps start_step..c.steps-1. A checkpoint of the parameters after
// k steps is written every --checkpoint-every steps, once step k + 1 has found
// a finite loss and finite gradients with them (so never from a diverged
// state); the final one by Run after the evaluation. A non-finite loss or
// gradient (the divergence rule of every trainer, docs/programs.md) stops the
// training there: the model goes back to the last parameters whose step had a
// finite loss and gradients (ts.kept_step), and ts.diverged_at_step says where.
TrainStats Train(const Config& c, const implicit::Communicator& comm, Workers& workers, Optimizers& adam,
                 const Matrix<double>& train, long start_step, const TrainingLosses& resumed) {
  EtModel& model = workers.main();
  Progress progress(!c.quiet && comm.is_root(), 5.0);
  const auto t0 = std::chrono::steady_clock::now();
  TrainStats ts;
  ts.losses = resumed;
  double smooth = -1;
  Vector<double> gm, ge;
  // The last parameters with which a step's loss and gradients were finite,
  // and how many steps they had been trained: what a diverged run keeps.
  Vector<double> good_model = model.params().values(), good_energy = model.energy_params().values();
  long good_step = start_step;
  for (long step = start_step; step < c.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    std::mt19937 gen(static_cast<unsigned>(c.seed) * 7919u + static_cast<unsigned>(step) * 104729u + 1u);
    std::uniform_int_distribution<Index> pick(0, train.cols() - 1);
    Matrix<double> batch(train.rows(), c.batch);
    for (Index b = 0; b < c.batch; ++b) batch.col(b) = train.col(pick(gen));
    const Matrix<double> masks = RandomMasks(c.batch, c.masked, gen);
    adam.Decay(CosineDecay(step, c.steps));
    const StepStats st = workers.Gradients(c, batch, masks, comm, &gm, &ge);
    if (!std::isfinite(st.loss) || !gm.allFinite() || !ge.allFinite()) {
      ts.diverged_at_step = step + 1;
      ts.divergence = "loss " + Fmt(st.loss) + (std::isfinite(st.loss) ? ", gradient not finite" : "");
      // Back to the parameters of the last finite step (those of this step
      // came out of an update that already ran away).
      model.params().values() = good_model;
      model.energy_params().values() = good_energy;
      workers.Sync();
      ts.kept_step = good_step;
      break;
    }
    good_model = model.params().values();
    good_energy = model.energy_params().values();
    good_step = step;
    if (c.checkpoint_every > 0 && step > start_step && step % c.checkpoint_every == 0) {
      OnEveryRank(comm, [&] {  // written by rank 0 only; a failure stops every rank
        if (comm.is_root()) Save(c, step, model, adam, ts.losses);
      });
      ts.saved_step = step;
    }
    adam.model.Step(model.params(), gm);
    adam.energy.Step(model.energy_params(), ge);
    workers.Sync();
    ts.backward_failures += st.backward_failed;
    ts.equilibrium_seconds.push_back(st.equilibrium_seconds);
    ts.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    ts.forward_unconverged += c.batch - st.forward_converged;
    if (ts.losses.first < 0) ts.losses.first = st.loss;
    ts.losses.last = st.loss;
    smooth = smooth < 0 ? st.loss : 0.9 * smooth + 0.1 * st.loss;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = static_cast<double>(step + 1 - start_step) / std::max(elapsed, 1e-9);
    progress.Update(Progress::Bar(static_cast<double>(step + 1) / static_cast<double>(c.steps)) + " step " +
                    std::to_string(step + 1) + "/" + std::to_string(c.steps) + "  loss " + Fmt(smooth, 4) + "  " +
                    FmtFixed(rate, 2) + " steps/s  " + FmtFixed(rate * static_cast<double>(c.batch), 0) +
                    " digits/s  fwd it " + std::to_string(st.forward_iterations) + "  eta " +
                    FmtFixed(static_cast<double>(c.steps - step - 1) / std::max(rate, 1e-9), 0) + " s");
  }
  progress.Done();
  ts.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ts;
}

// The held-out evaluation on fixed masks: the ET, mean fill and the best
// one-step Hopfield completion, and the paired per-digit difference ET - Hopfield.
struct Evaluation {
  Matrix<double> masks, pixel_mask, pred, hop_pred;
  implicit::Summary summary;
  double et_mse = 0, mean_mse = 0, hop_mse = 1e300, best_beta = 0, diff_mean = 0, diff_stderr = 0;
  long better = 0;
};

Evaluation Evaluate(const Config& c, Workers& workers, const implicit::Communicator& comm, const Matrix<double>& train,
                    const Matrix<double>& test) {
  Evaluation e;
  std::mt19937 eval_gen(static_cast<unsigned>(c.seed) + 424242u);
  e.masks = RandomMasks(test.cols(), c.masked, eval_gen);
  e.pixel_mask = PixelMask(e.masks);
  e.pred = workers.Predict(c, test, e.masks, comm, &e.summary);
  e.et_mse = MaskedMse(e.pred, test, e.pixel_mask);
  Matrix<double> mean_fill = test;
  mean_fill.colwise() = Vector<double>(train.rowwise().mean());
  e.mean_mse = MaskedMse(mean_fill, test, e.pixel_mask);
  for (double beta : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    Matrix<double> h = HopfieldComplete(train, test, e.pixel_mask, beta);
    const double m = MaskedMse(h, test, e.pixel_mask);
    if (m < e.hop_mse) {
      e.hop_mse = m;
      e.best_beta = beta;
      e.hop_pred = std::move(h);
    }
  }
  // Paired over the held-out digits (same digits, same masks): per-digit masked
  // MSE of the ET minus that of Hopfield, its mean and standard error.
  const Vector<double> diff =
      ((e.pred - test).array().square() - (e.hop_pred - test).array().square())
          .cwiseProduct(e.pixel_mask.array())
          .colwise()
          .sum()
          .transpose()
          .cwiseQuotient(e.pixel_mask.colwise().sum().transpose().array())
          .matrix();
  const double n = static_cast<double>(diff.size());
  e.diff_mean = diff.mean();
  e.diff_stderr = std::sqrt((diff.array() - e.diff_mean).square().sum() / std::max(1.0, n - 1) / n);
  e.better = static_cast<long>((diff.array() < 0.0).count());
  return e;
}

void PrintEvaluation(const Config& c, const TrainStats& ts, long start_step, const Evaluation& e) {
  if (start_step >= c.steps && !c.resume.empty()) {
    std::cout << "nothing to do: checkpoint '" << c.resume << "' is at step " << start_step
              << ", at or past --steps " << c.steps << " (the total); trained 0 steps, evaluating it\n";
  } else if (start_step >= c.steps) {
    std::cout << "nothing to do: --steps 0; trained 0 steps, evaluating the initial model\n";
  } else {
    if (ts.diverged_at_step > 0) std::cout << "training diverged at step " << ts.diverged_at_step << "; ";
    if (ts.step_seconds.empty()) {
      std::cout << "trained 0 steps\n";
    } else {
      std::cout << "trained " << ts.step_seconds.size() << " steps in " << FmtFixed(ts.seconds, 1)
                << " s (median step " << Fmt(Median(ts.step_seconds), 3) << " s, "
                << Fmt(Median(ts.equilibrium_seconds), 3)
                << " s of it in the equilibrium solve and IFT backward pass); training loss "
                << Fmt(ts.losses.first, 4) << " -> " << Fmt(ts.losses.last, 4) << "\n";
    }
  }
  if (!c.unroll) std::cout << "held-out forward: " << e.summary.BriefReport() << "\n";
  Table t({"held-out masked MSE", "value", "vs ET"}, {false, true, true});
  t.AddRow({std::string("energy transformer (") + (c.unroll ? "unrolled" : "implicit") + ")", FmtFixed(e.et_mse, 4),
            "1.00x"});
  t.AddRow({"one-step Hopfield (best beta " + Fmt(e.best_beta) + ")", FmtFixed(e.hop_mse, 4),
            FmtFixed(e.hop_mse / e.et_mse, 2) + "x"});
  t.AddRow({"mean fill", FmtFixed(e.mean_mse, 4), FmtFixed(e.mean_mse / e.et_mse, 2) + "x"});
  t.Print(std::cout);
  std::cout << "ET minus one-step Hopfield, per held-out digit: " << Fmt(e.diff_mean, 3) << " +- "
            << Fmt(e.diff_stderr, 2) << " (standard error); ET better on " << e.better << "/" << e.pred.cols()
            << " digits\n";
}

// The PNG grid of the first 12 held-out digits: original, masked, ET and
// Hopfield completions (visible pixels as given, masked pixels predicted).
void WriteImage(const Config& c, const Matrix<double>& test, const Evaluation& e) {
  const Index shown = std::min<Index>(12, test.cols());
  auto complete = [&](const Matrix<double>& p) {
    return Matrix<double>(
        (e.pixel_mask.array() * p.array() + (1.0 - e.pixel_mask.array()) * test.array()).matrix().leftCols(shown));
  };
  WriteGrid(c.image, {test.leftCols(shown), test.leftCols(shown), complete(e.pred), complete(e.hop_pred)},
            e.masks.leftCols(shown));
  std::cout << "image: " << c.image
            << " (rows: original, masked patches in gray, energy transformer completion, one-step Hopfield "
               "completion)\n";
}

void WriteJson(const Config& c, const TrainStats& ts, const Evaluation& e, Index n_train, Index parameters) {
  Json o;
  o["mode"] = c.unroll ? "unroll" : "implicit";
  o["steps"] = c.steps;
  o["batch"] = c.batch;
  o["masked_patches"] = c.masked;
  o["train_digits"] = n_train;
  o["heldout_digits"] = c.holdout;
  o["heldout_mse"] = e.et_mse;
  o["mean_fill_mse"] = e.mean_mse;
  o["hopfield_mse"] = e.hop_mse;
  o["hopfield_beta"] = e.best_beta;
  o["hopfield_difference"] = e.diff_mean;
  o["hopfield_difference_stderr"] = e.diff_stderr;
  o["digits_better_than_hopfield"] = e.better;
  o["first_train_loss"] = ts.losses.first;
  o["last_train_loss"] = ts.losses.last;
  o["train_seconds"] = ts.seconds;
  o["device"] = c.device;
  const bool trained = !ts.step_seconds.empty();
  o["median_step_seconds"] = trained ? Json(Median(ts.step_seconds)) : Json(nullptr);
  o["median_equilibrium_seconds"] = trained ? Json(Median(ts.equilibrium_seconds)) : Json(nullptr);
  o["diverged_at_step"] = ts.diverged_at_step > 0 ? Json(ts.diverged_at_step) : Json(nullptr);
  o["divergence"] = ts.diverged_at_step > 0 ? Json(ts.divergence) : Json(nullptr);
  o["kept_step"] = ts.diverged_at_step > 0 ? Json(ts.kept_step) : Json(nullptr);
  o["backward_failures"] = ts.backward_failures;
  o["forward_unconverged"] = ts.forward_unconverged;
  o["heldout_forward_status"] =
      c.unroll ? "unrolled" : implicit::TerminationTypeToString(e.summary.termination_type);
  o["parameters"] = parameters;
  o["checkpoint"] = c.checkpoint;
  o["image"] = c.image;
  WriteJsonFile(c.json, o, "--json");
  std::cout << "json: " << c.json << "\n";
}

void PrintHeader(const Config& c, int ranks, Index n_train, Index parameters, const std::string& device_name) {
  std::cout << "implicit-et: " << n_train << " training digits, " << c.holdout << " held out; " << c.masked
            << " of 16 patches masked; ET " << ConfigKey(c) << ", " << parameters << " parameters; "
            << (ranks > 1 ? std::to_string(ranks) + " MPI ranks x " : "") << c.threads
            << (c.threads == 1 ? " thread; " : " threads; ")
            << (c.unroll ? "backprop through " + std::to_string(c.unroll_steps) + " unrolled gradient steps"
                         : "implicit gradients at the equilibrium (" + c.solver + " forward, " +
                               (c.device == "cuda" ? "Anderson adjoint, both on the GPU " + device_name
                                                   : std::string("GMRES adjoint")) +
                               ")")
            << "\n";
}

// "<n> training digits, fnv1a <hash of their pixels>": what a checkpoint was trained on.
std::string DataKey(const Matrix<double>& train) {
  std::uint64_t h = 14695981039346656037ULL;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(train.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(train.size()) * sizeof(double); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(train.cols()) + " training digits, fnv1a " + hex;
}

int Run(int argc, char** argv) {
  const implicit::Communicator& comm = AppCommunicator();
  Config c;
  if (!ParseConfig(argc, argv, &c)) return 0;
  // Under mpirun the ranks share the machine's cores unless --threads says otherwise.
  if (!c.threads_given) c.threads = std::max(1L, c.threads / comm.size());
  Require(c.device == "cpu" || comm.size() == 1, "--device cuda: runs in one process, not over MPI ranks");
  if (c.check_gradients == 0 && comm.is_root()) {
    // Temporary files of writers killed while saving this checkpoint.
    for (const std::string& f : implicit::RemoveStaleCheckpointTemporaries(c.checkpoint))
      if (!c.quiet) std::cerr << "implicit-et: removed '" << f << "', left by a checkpoint writer that was killed\n";
  }
  const implicit::DigitsDataset digits = LoadDigitsOption(c.data);
  Require(c.holdout < digits.size(), "--holdout: must be in 1.." + std::to_string(digits.size() - 1) + ", got " +
                                         std::to_string(c.holdout));
  const Matrix<double> all = DigitPatches(digits.Scaled());
  const Index n_train = digits.size() - c.holdout;
  const Matrix<double> train = all.leftCols(n_train), test = all.rightCols(c.holdout);
  c.data_key = DataKey(train);

  Workers workers(c, c.threads);
  EtModel& model = workers.main();
  Optimizers adam(c);
  TrainingLosses resumed;
  const long start_step = c.resume.empty() ? 0 : Resume(c, workers, adam, &resumed);
  if (c.check_gradients > 0) return CheckGradients(c, model, train);
  const Index parameters = model.params().size() + model.energy_params().size();
  PrintHeader(c, comm.size(), n_train, parameters, model.device_name());
  const TrainStats ts = Train(c, comm, workers, adam, train, start_step, resumed);
  const Evaluation e = Evaluate(c, workers, comm, train, test);
  if (!std::isfinite(e.et_mse))
    throw std::runtime_error("the held-out masked MSE of the trained model is not finite (" + Fmt(e.et_mse) +
                             "): " + CheckpointState(c, ts, start_step) + "; --json and --image not written");
  PrintEvaluation(c, ts, start_step, e);
  const bool diverged = ts.diverged_at_step > 0;
  if (diverged && comm.is_root()) {
    std::cerr << "implicit-et: training diverged at step " << ts.diverged_at_step << " (" << ts.divergence
              << "); lower --lr or --energy-lr: evaluated with the parameters after step " << ts.kept_step
              << " (the last with a finite loss); " << CheckpointState(c, ts, start_step) << "\n";
  }
  // Every output asked for is written (by rank 0), or the run fails naming
  // each one that was not. The final checkpoint only when this run trained
  // to the end (a resumed checkpoint at or past --steps stays as it is, and
  // a diverged run keeps the last good one).
  if (!comm.is_root()) return diverged ? kDivergedExitStatus : 0;
  Outputs outputs;
  if (diverged) {
    std::cout << "checkpoint: " << c.checkpoint << " not written (training diverged)\n";
  } else if (start_step < c.steps) {
    outputs.Write("--checkpoint", c.checkpoint, [&] {
      Save(c, c.steps, model, adam, ts.losses);
      std::cout << "checkpoint: " << c.checkpoint << " (step " << c.steps << ")\n";
    });
  } else {
    std::cout << "checkpoint: " << c.checkpoint << " not written (nothing trained)\n";
  }
  outputs.Write("--image", c.image, [&] { WriteImage(c, test, e); });
  outputs.Write("--json", c.json, [&] { WriteJson(c, ts, e, n_train, parameters); });
  outputs.Finish();
  return diverged ? kDivergedExitStatus : 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-et", [&] { return implicit_apps::Run(argc, argv); });
}
