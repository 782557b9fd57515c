/// \file
/// Scores of a binary detector (e.g.\ node anomaly detection, where anomalies are
/// the rare positive class) and stratified data splits.
///
/// \verbatim
///   Auroc             area under the ROC curve: the probability that a random
///                     positive scores above a random negative (ties count 1/2)
///   AveragePrecision  area under the precision-recall curve, as the sum over
///                     score thresholds of (recall step) x precision; ties in
///                     the scores form one threshold
///   MacroF1           mean of the F1 scores of both classes when "score >=
///                     threshold" predicts positive
///   BestMacroF1Threshold  the threshold (one of the scores) with the highest
///                     macro-F1 on the given data, e.g. chosen on validation
///   StratifiedSplit   train / validation / test index sets with each class
///                     divided in the same proportions, reproducible by seed
/// \endverbatim
///
/// \code
///   std::vector<double> scores = ...;   std::vector<int> anomalous = ...;  // 0/1
///   double auc = implicit::Auroc(scores, anomalous);
///   implicit::DataSplit split = implicit::StratifiedSplit(anomalous, 0.4, 0.2, seed);
/// \endcode
///
/// Sizes that differ, labels other than 0/1, a class with no member, and
/// non-finite scores throw std::invalid_argument naming the problem.
#pragma once

#include <implicit/core/types.h>

#include <cstdint>
#include <vector>

namespace implicit {

/// Area under the ROC curve: the probability that a random positive (label 1)
/// scores above a random negative (label 0), ties counting 1/2.
/// \throws std::invalid_argument when the sizes differ, a label is not 0 or 1,
///   a class has no member or a score is not finite.
double Auroc(const std::vector<double>& scores, const std::vector<int>& labels);
/// Area under the precision-recall curve, as the sum over score thresholds of
/// (recall step) x precision; ties in the scores form one threshold.
/// \throws std::invalid_argument when the sizes differ, a label is not 0 or 1,
///   a class has no member or a score is not finite.
double AveragePrecision(const std::vector<double>& scores, const std::vector<int>& labels);
/// Mean of the F1 scores of both classes when "score >= threshold" predicts
/// positive.
/// \throws std::invalid_argument when the sizes differ, a label is not 0 or 1,
///   a class has no member or a score is not finite.
double MacroF1(const std::vector<double>& scores, const std::vector<int>& labels, double threshold);
/// The threshold (one of the scores) with the highest macro-F1 (see MacroF1)
/// on the given data, e.g.\ chosen on validation data.
/// \throws std::invalid_argument when the sizes differ, a label is not 0 or 1,
///   a class has no member or a score is not finite.
double BestMacroF1Threshold(const std::vector<double>& scores, const std::vector<int>& labels);

/// Train / validation / test index sets, as StratifiedSplit makes them.
struct DataSplit {
  ///@{
  /// The indices of each set, each sorted.
  std::vector<Index> train, validation, test;
  ///@}
};

/// Divides the indices 0..N-1 by class (labels: any integers), each class in
/// the same proportions, chosen at random with `seed`.
///
/// From each class of size c, round(train_ratio c) members (at least 1) go to
/// train, round(validation_ratio c) (at least 1 when c >= 3) to validation,
/// the rest to test. Needs 0 < train_ratio, 0 <= validation_ratio,
/// train_ratio + validation_ratio < 1.
/// \throws std::invalid_argument when the ratios are outside these ranges.
DataSplit StratifiedSplit(const std::vector<int>& labels, double train_ratio,
                          double validation_ratio, std::uint64_t seed);

}  // namespace implicit
