// A class-weighted logistic-regression detector: the baseline scorer of
// implicit-graph. score_i = w . x_i + b, trained with Adam on the training
// nodes to minimise the class-weighted logistic loss (WeightedLogisticLoss,
// detector_training.h). Early stopping keeps the parameters with the best
// validation AUROC (checked every epoch; training stops after `patience`
// epochs without improvement).
//
//   LogisticDetector::Options o;   // epochs 300, learning_rate 0.01, ...
//   LogisticDetector::Result r = LogisticDetector(o).Train(x, anomalous, split);
//   std::vector<double> scores = r.scores;   // one per node (all splits)
#pragma once

#include "graph/detector_training.h"

#include <implicit/core/classification_metrics.h>
#include <implicit/core/optimizers.h>
#include <implicit/core/parameters.h>
#include <implicit/core/types.h>

#include <chrono>
#include <vector>

namespace implicit_apps {

class LogisticDetector {
 public:
  struct Options {
    int epochs = 300;             // full-batch Adam steps at most
    double learning_rate = 0.01;
    double weight_decay = 1e-4;   // decoupled (AdamW)
    int patience = 50;            // epochs without a better validation AUROC before stopping
  };
  using Result = TrainingResult;

  explicit LogisticDetector(const Options& options) : options_(options) {}

  // x: d x N features; anomalous: N labels 0/1; training and validation nodes from `split`.
  Result Train(const implicit::Matrix<double>& x, const std::vector<int>& anomalous,
               const implicit::DataSplit& split) const {
    const implicit::Index d = x.rows();
    implicit::ParameterSet<double> params;
    params.Add("w", d, 1);
    params.Add("b", 1, 1);
    implicit::AdamOptimizer<double>::Options adam_options;
    adam_options.learning_rate = options_.learning_rate;
    adam_options.weight_decay = options_.weight_decay;
    implicit::AdamOptimizer<double> adam(adam_options);
    const WeightedLogisticLoss loss(anomalous, split.train);
    EarlyStopping stopping(options_.patience);

    Result result;
    implicit::Vector<double> best = params.values();
    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= options_.epochs; ++epoch) {
      implicit::Vector<double> grad = implicit::Vector<double>::Zero(params.size());
      for (std::size_t k = 0; k < split.train.size(); ++k) {
        const implicit::Index i = split.train[k];
        const double g = loss.Derivative(k, Score(params, x, i));
        grad.head(d) += g * x.col(i);
        grad(d) += g;
      }
      adam.Step(params, grad / loss.total_weight());
      const std::vector<double> validation = Scores(params, x, split.validation);
      if (Diverged(epoch, validation, &result)) break;
      if (stopping.Improved(epoch, implicit::Auroc(validation, Subset(anomalous, split.validation)))) {
        best = params.values();
      } else if (stopping.ShouldStop(epoch)) {
        break;
      }
    }
    stopping.Report(start, &result);
    params.values() = best;
    std::vector<implicit::Index> all(static_cast<std::size_t>(x.cols()));
    for (implicit::Index i = 0; i < x.cols(); ++i) all[i] = i;
    result.scores = Scores(params, x, all);
    return result;
  }

 private:
  static double Score(const implicit::ParameterSet<double>& p, const implicit::Matrix<double>& x, implicit::Index i) {
    const implicit::Index d = x.rows();
    return p.values().head(d).dot(x.col(i)) + p.values()(d);
  }
  static std::vector<double> Scores(const implicit::ParameterSet<double>& p, const implicit::Matrix<double>& x,
                                    const std::vector<implicit::Index>& nodes) {
    std::vector<double> out;
    for (implicit::Index i : nodes) out.push_back(Score(p, x, i));
    return out;
  }
  Options options_;
};

}  // namespace implicit_apps
