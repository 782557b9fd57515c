// A two-layer graph convolutional network (Kipf & Welling's GCN) as a node
// anomaly detector: implicit-graph's "gcn" baseline. With the normalised
// adjacency S = D^-1/2 (A + I) D^-1/2 (D the degrees of A + I) and node
// features X (F x N, node i = column i),
//   H = relu(W1 X S^T + b1),   score = w2 . (H S^T) + b2,
// i.e. two rounds of degree-normalised neighbourhood averaging, a hidden layer
// of `hidden` ReLU units and a linear readout. Trained like the logistic
// baseline (logistic_detector.h): class-weighted logistic loss on the training
// nodes, full-batch Adam from the library, early stopping on validation
// AUROC. Gcn holds the network and its exact gradient (tested against finite
// differences in test/apps/graph_detectors_test.cc); GcnDetector trains it.
//
//   GcnDetector::Options o;        // hidden 16, the logistic baseline's training options
//   GcnDetector::Result r = GcnDetector(o).Train(graph, x, anomalous, split);
//   std::vector<double> scores = r.scores;   // one per node
#pragma once

#include "graph/detector_training.h"
#include "graph/logistic_detector.h"
#include "graph/node_features.h"

#include <implicit/core/classification_metrics.h>
#include <implicit/core/graph_data.h>
#include <implicit/core/optimizers.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <Eigen/SparseCore>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

namespace implicit_apps {

class Gcn {
 public:
  using Index = implicit::Index;
  using Matrix = implicit::Matrix<double>;
  using Vector = implicit::Vector<double>;

  // x: F x N node features of graph g (its CSR lists; a stored self-loop adds
  // to the one A + I has).
  Gcn(const implicit::GraphDataset& g, const Matrix& x, Index hidden) {
    adjacency_ = NormalizedAdjacency(g);
    aggregated_ = x * adjacency_.transpose();
    params_.Add("W1", hidden, x.rows());
    params_.Add("b1", hidden, 1);
    params_.Add("w2", hidden, 1);
    params_.Add("b2", 1, 1);
  }

  implicit::ParameterSet<double>& parameters() { return params_; }
  const implicit::ParameterSet<double>& parameters() const { return params_; }

  // W1 ~ N(0, 2 / F) (He), w2 ~ N(0, 1 / hidden), biases 0.
  void Initialize(unsigned seed) {
    std::mt19937 random(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    params_.values().setZero();
    auto w1 = params_.Block("W1");
    auto w2 = params_.Block("w2");
    for (Index k = 0; k < w1.size(); ++k) w1.data()[k] = normal(random) * std::sqrt(2.0 / double(w1.cols()));
    for (Index k = 0; k < w2.size(); ++k) w2.data()[k] = normal(random) / std::sqrt(double(w2.rows()));
  }

  // Every node's score with the current parameters (kept for Gradient).
  const Vector& Forward() {
    pre_activation_ = params_.Block("W1") * aggregated_;
    pre_activation_.colwise() += Vector(params_.Block("b1"));
    hidden_aggregated_ = pre_activation_.cwiseMax(0.0) * adjacency_.transpose();
    scores_ = hidden_aggregated_.transpose() * Vector(params_.Block("w2"));
    scores_.array() += params_.Block("b2")(0, 0);
    return scores_;
  }

  // The last Forward's scores.
  const Vector& scores() const { return scores_; }

  // d(sum_i dscores_i score_i)/d parameters at the last Forward's parameters.
  Vector Gradient(const Vector& dscores) const {
    Vector grad = Vector::Zero(params_.size());
    params_.BlockOf(grad, "w2") = hidden_aggregated_ * dscores;
    params_.BlockOf(grad, "b2")(0, 0) = dscores.sum();
    // d/dH of w2 . (H S^T) g = w2 g^T S; through the ReLU, then W1 X S^T + b1.
    Matrix dpre = (Vector(params_.Block("w2")) * dscores.transpose()) * adjacency_;
    dpre = (pre_activation_.array() > 0.0).select(dpre, 0.0);
    params_.BlockOf(grad, "W1") = dpre * aggregated_.transpose();
    params_.BlockOf(grad, "b1") = dpre.rowwise().sum();
    return grad;
  }

 private:
  Eigen::SparseMatrix<double, Eigen::RowMajor> adjacency_;  // S, N x N
  Matrix aggregated_;                                        // X S^T, F x N
  implicit::ParameterSet<double> params_;
  Matrix pre_activation_, hidden_aggregated_;                // W1 X S^T + b1, relu(.) S^T
  Vector scores_;
};

class GcnDetector {
 public:

  struct Options {
    LogisticDetector::Options training;  // epochs, learning rate, weight decay, patience
    implicit::Index hidden = 16;         // hidden ReLU units
    unsigned seed = 1;                   // initial weights
  };
  using Result = TrainingResult;

  explicit GcnDetector(const Options& options) : options_(options) {}

  // x: F x N standardised node features; anomalous: N labels 0/1.
  Result Train(const implicit::GraphDataset& g, const implicit::Matrix<double>& x,
               const std::vector<int>& anomalous, const implicit::DataSplit& split) const {
    Gcn gcn(g, x, options_.hidden);
    gcn.Initialize(options_.seed);
    implicit::AdamOptimizer<double>::Options adam_options;
    adam_options.learning_rate = options_.training.learning_rate;
    adam_options.weight_decay = options_.training.weight_decay;
    implicit::AdamOptimizer<double> adam(adam_options);
    const WeightedLogisticLoss loss(anomalous, split.train);
    EarlyStopping stopping(options_.training.patience);

    Result result;
    implicit::Vector<double> best = gcn.parameters().values();
    implicit::Vector<double> dscores = implicit::Vector<double>::Zero(x.cols());
    const auto start = std::chrono::steady_clock::now();
    gcn.Forward();
    for (int epoch = 1; epoch <= options_.training.epochs; ++epoch) {
      const implicit::Vector<double>& scores = gcn.scores();
      for (std::size_t k = 0; k < split.train.size(); ++k)
        dscores(split.train[k]) = loss.Derivative(k, scores(split.train[k])) / loss.total_weight();
      adam.Step(gcn.parameters(), gcn.Gradient(dscores));
      const std::vector<double> all = AsStdVector(gcn.Forward());
      if (Diverged(epoch, all, &result)) break;
      if (stopping.Improved(epoch, ValidationAuroc(all, anomalous, split))) {
        best = gcn.parameters().values();
      } else if (stopping.ShouldStop(epoch)) {
        break;
      }
    }
    stopping.Report(start, &result);
    gcn.parameters().values() = best;
    result.scores = AsStdVector(gcn.Forward());
    return result;
  }

 private:
  static std::vector<double> AsStdVector(const implicit::Vector<double>& v) {
    return std::vector<double>(v.data(), v.data() + v.size());
  }
  Options options_;
};

}  // namespace implicit_apps
