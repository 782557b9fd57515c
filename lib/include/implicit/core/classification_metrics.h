// Scores of a binary detector (e.g. node anomaly detection, where anomalies are
// the rare positive class) and stratified data splits.
//
//   Auroc             area under the ROC curve: the probability that a random
//                     positive scores above a random negative (ties count 1/2)
//   AveragePrecision  area under the precision-recall curve, as the sum over
//                     score thresholds of (recall step) x precision; ties in
//                     the scores form one threshold
//   MacroF1           mean of the F1 scores of both classes when "score >=
//                     threshold" predicts positive
//   BestMacroF1Threshold  the threshold (one of the scores) with the highest
//                     macro-F1 on the given data, e.g. chosen on validation
//   StratifiedSplit   train / validation / test index sets with each class
//                     divided in the same proportions, reproducible by seed
//
//   std::vector<double> scores = ...;   std::vector<int> anomalous = ...;  // 0/1
//   double auc = implicit::Auroc(scores, anomalous);
//   implicit::DataSplit split = implicit::StratifiedSplit(anomalous, 0.4, 0.2, seed);
//
// Sizes that differ, labels other than 0/1, a class with no member, and
// non-finite scores throw std::invalid_argument naming the problem.
#pragma once

#include <implicit/core/types.h>

#include <cstdint>
#include <vector>

namespace implicit {

double Auroc(const std::vector<double>& scores, const std::vector<int>& labels);
double AveragePrecision(const std::vector<double>& scores, const std::vector<int>& labels);
double MacroF1(const std::vector<double>& scores, const std::vector<int>& labels, double threshold);
double BestMacroF1Threshold(const std::vector<double>& scores, const std::vector<int>& labels);

struct DataSplit {
  std::vector<Index> train, validation, test;  // each sorted
};

// Divides the indices 0..N-1 by class (labels: any integers): from each class
// of size c, round(train_ratio c) members (at least 1) go to train,
// round(validation_ratio c) (at least 1 when c >= 3) to validation, the rest
// to test, chosen at random with `seed`. Needs 0 < train_ratio,
// 0 <= validation_ratio, train_ratio + validation_ratio < 1.
DataSplit StratifiedSplit(const std::vector<int>& labels, double train_ratio,
                          double validation_ratio, std::uint64_t seed);

}  // namespace implicit
