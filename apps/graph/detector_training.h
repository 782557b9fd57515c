// What the detectors of implicit-graph share in training (logistic_detector.h,
// gcn_detector.h, et_detector.h): the class-weighted logistic loss on the
// training nodes, early stopping on validation AUROC, the divergence rule, and
// picking the values of a node subset.
//
//   WeightedLogisticLoss loss(anomalous, split.train);
//   EarlyStopping stopping(patience);
//   for (int epoch = 1; ...; ++epoch) {
//     for (k ...) g_k = loss.Derivative(k, score[split.train[k]]);   // then / loss.total_weight()
//     if (Diverged(epoch, scores, &result)) break;                      // keep the best epoch's
//     if (stopping.Improved(epoch, ValidationAuroc(scores, anomalous, split))) best = params;
//     else if (stopping.ShouldStop(epoch)) break;
//   }
#pragma once

#include <implicit/core/classification_metrics.h>
#include <implicit/core/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace implicit_apps {

// values[i] for each i in `nodes`, in that order.
template <typename T>
std::vector<T> Subset(const std::vector<T>& values, const std::vector<implicit::Index>& nodes) {
  std::vector<T> out;
  out.reserve(nodes.size());
  for (implicit::Index i : nodes) out.push_back(values[i]);
  return out;
}

// L = sum_k c_k log(1 + exp(-s_k score_k)) / sum_k c_k over the training nodes
// k, s_k = +1 for an anomaly and -1 otherwise, c_k = N / (2 N_class) of node
// k's class in the training split, so the rare anomalies count as much as the
// normal nodes. Throws std::runtime_error when the split lacks a class.
class WeightedLogisticLoss {
 public:
  WeightedLogisticLoss(const std::vector<int>& anomalous, const std::vector<implicit::Index>& train) {
    double positives = 0;
    for (implicit::Index i : train) positives += anomalous[i];
    const double n = static_cast<double>(train.size());
    if (positives == 0 || positives == n)
      throw std::runtime_error("the training split needs both normal and anomalous nodes");
    for (implicit::Index i : train) {
      sign_.push_back(anomalous[i] ? 1.0 : -1.0);
      weight_.push_back(n / (2 * (anomalous[i] ? positives : n - positives)));
      total_weight_ += weight_.back();
    }
  }

  // d/dscore of c_k log(1 + exp(-s_k score)) = -c_k s_k sigmoid(-s_k score) for
  // the k-th training node (not yet divided by total_weight()).
  double Derivative(std::size_t k, double score) const {
    return -weight_[k] * sign_[k] / (1.0 + std::exp(sign_[k] * score));
  }
  double total_weight() const { return total_weight_; }

 private:
  std::vector<double> sign_, weight_;
  double total_weight_ = 0;
};

// The AUROC of `scores` (one per node) on the validation nodes.
inline double ValidationAuroc(const std::vector<double>& scores, const std::vector<int>& anomalous,
                              const implicit::DataSplit& split) {
  return implicit::Auroc(Subset(scores, split.validation), Subset(anomalous, split.validation));
}

// What a detector's training returns (the ET's adds its solver counts).
struct TrainingResult {
  std::vector<double> scores;      // for every node, with the best parameters
  int epochs_run = 0, best_epoch = 0;
  double best_validation_auroc = 0;
  double seconds_per_epoch = 0;
  int diverged_at_epoch = 0;       // > 0: the epoch whose scores were not finite (Diverged)
};

// The divergence rule of every detector: an epoch whose scores are not all
// finite (a learning rate too large for the model; for the ET also a forward
// solve that meets NaN or inf) ends the training there;
// the detector keeps, and is scored with, the parameters of its best epoch
// (the untrained ones when the first step already diverged), and the run
// reports the epoch. Returns true when `scores` diverged.
inline bool Diverged(int epoch, const std::vector<double>& scores, TrainingResult* r) {
  for (double s : scores) {
    if (std::isfinite(s)) continue;
    r->diverged_at_epoch = epoch;
    return true;
  }
  return false;
}

// Early stopping: remembers the best validation AUROC and its epoch.
class EarlyStopping {
 public:
  explicit EarlyStopping(int patience) : patience_(patience) {}
  // True when `auroc` beats every earlier epoch's (the caller keeps its parameters).
  bool Improved(int epoch, double auroc) {
    epochs_run_ = epoch;
    if (!(auroc > best_auroc_)) return false;
    best_auroc_ = auroc;
    best_epoch_ = epoch;
    return true;
  }
  // True after `patience` epochs without an improvement.
  bool ShouldStop(int epoch) const { return epoch - best_epoch_ >= patience_; }
  double best_auroc() const { return best_auroc_; }
  int best_epoch() const { return best_epoch_; }
  int epochs_run() const { return epochs_run_; }
  // Fills r's epochs, best epoch and AUROC, and the time per epoch since `start`.
  void Report(std::chrono::steady_clock::time_point start, TrainingResult* r) const {
    r->epochs_run = epochs_run_;
    r->best_epoch = best_epoch_;
    r->best_validation_auroc = best_auroc_;
    r->seconds_per_epoch =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / std::max(1, epochs_run_);
  }

 private:
  int patience_;
  double best_auroc_ = -1;
  int best_epoch_ = 0, epochs_run_ = 0;
};

}  // namespace implicit_apps
