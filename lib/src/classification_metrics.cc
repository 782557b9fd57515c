// Binary detection scores and stratified splits (see classification_metrics.h).
#include <implicit/core/classification_metrics.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace implicit {
namespace {

// Checks the inputs; returns the number of positives.
Index CheckBinary(const char* what, const std::vector<double>& scores, const std::vector<int>& labels) {
  if (scores.size() != labels.size()) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(scores.size()) + " scores but " +
                                std::to_string(labels.size()) + " labels");
  }
  Index positives = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0 && labels[i] != 1)
      throw std::invalid_argument(std::string(what) + ": label " + std::to_string(labels[i]) + " at " +
                                  std::to_string(i) + " is not 0 or 1");
    if (!std::isfinite(scores[i]))
      throw std::invalid_argument(std::string(what) + ": score at " + std::to_string(i) + " is not finite");
    positives += labels[i];
  }
  const Index negatives = static_cast<Index>(labels.size()) - positives;
  if (positives == 0 || negatives == 0)
    throw std::invalid_argument(std::string(what) + ": needs both classes, got " + std::to_string(positives) +
                                " positives and " + std::to_string(negatives) + " negatives");
  return positives;
}

// Indices sorted by descending score.
std::vector<std::size_t> ByDescendingScore(const std::vector<double>& scores) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  return order;
}

// Calls visit(true_positives, false_positives, threshold) after each group of
// tied scores, walking from the highest score down.
template <typename Visit>
void ForEachThreshold(const std::vector<double>& scores, const std::vector<int>& labels, Visit visit) {
  const std::vector<std::size_t> order = ByDescendingScore(scores);
  Index tp = 0, fp = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    (labels[order[k]] == 1 ? tp : fp) += 1;
    if (k + 1 == order.size() || scores[order[k + 1]] != scores[order[k]]) visit(tp, fp, scores[order[k]]);
  }
}

double F1(double tp, double fp, double fn) { return tp == 0 ? 0.0 : 2 * tp / (2 * tp + fp + fn); }

}  // namespace

double Auroc(const std::vector<double>& scores, const std::vector<int>& labels) {
  const Index positives = CheckBinary("Auroc", scores, labels);
  const Index negatives = static_cast<Index>(labels.size()) - positives;
  // Trapezoids between consecutive thresholds: a tied group counts its
  // positive-negative pairs one half.
  double area = 0;
  Index last_tp = 0, last_fp = 0;
  ForEachThreshold(scores, labels, [&](Index tp, Index fp, double) {
    area += static_cast<double>(fp - last_fp) * 0.5 * static_cast<double>(tp + last_tp);
    last_tp = tp;
    last_fp = fp;
  });
  return area / (static_cast<double>(positives) * static_cast<double>(negatives));
}

double AveragePrecision(const std::vector<double>& scores, const std::vector<int>& labels) {
  const Index positives = CheckBinary("AveragePrecision", scores, labels);
  double ap = 0;
  Index last_tp = 0;
  ForEachThreshold(scores, labels, [&](Index tp, Index fp, double) {
    ap += static_cast<double>(tp - last_tp) / static_cast<double>(positives) *
          (static_cast<double>(tp) / static_cast<double>(tp + fp));
    last_tp = tp;
  });
  return ap;
}

double MacroF1(const std::vector<double>& scores, const std::vector<int>& labels, double threshold) {
  CheckBinary("MacroF1", scores, labels);
  double tp = 0, fp = 0, fn = 0, tn = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const bool predicted = scores[i] >= threshold;
    if (labels[i] == 1) (predicted ? tp : fn) += 1;
    else (predicted ? fp : tn) += 1;
  }
  return 0.5 * (F1(tp, fp, fn) + F1(tn, fn, fp));
}

double BestMacroF1Threshold(const std::vector<double>& scores, const std::vector<int>& labels) {
  const Index positives = CheckBinary("BestMacroF1Threshold", scores, labels);
  const double n = static_cast<double>(labels.size()), p = static_cast<double>(positives);
  double best = -1, best_threshold = 0;
  ForEachThreshold(scores, labels, [&](Index tp_i, Index fp_i, double threshold) {
    const double tp = static_cast<double>(tp_i), fp = static_cast<double>(fp_i);
    const double fn = p - tp, tn = n - p - fp;
    const double macro = 0.5 * (F1(tp, fp, fn) + F1(tn, fn, fp));
    if (macro > best) {
      best = macro;
      best_threshold = threshold;
    }
  });
  return best_threshold;
}

DataSplit StratifiedSplit(const std::vector<int>& labels, double train_ratio, double validation_ratio,
                          std::uint64_t seed) {
  if (!(train_ratio > 0) || !(validation_ratio >= 0) || !(train_ratio + validation_ratio < 1)) {
    throw std::invalid_argument("StratifiedSplit: needs 0 < train_ratio, 0 <= validation_ratio and their sum < 1, got " +
                                std::to_string(train_ratio) + " and " + std::to_string(validation_ratio));
  }
  std::map<int, std::vector<Index>> classes;
  for (std::size_t i = 0; i < labels.size(); ++i) classes[labels[i]].push_back(static_cast<Index>(i));
  std::mt19937_64 random(seed);
  DataSplit split;
  for (auto& entry : classes) {
    std::vector<Index>& members = entry.second;
    std::shuffle(members.begin(), members.end(), random);
    const Index c = static_cast<Index>(members.size());
    const Index train = std::min<Index>(c, std::max<Index>(1, std::llround(train_ratio * c)));
    Index validation = std::llround(validation_ratio * c);
    if (validation_ratio > 0 && c >= 3) validation = std::max<Index>(validation, 1);
    validation = std::min(validation, c - train);
    split.train.insert(split.train.end(), members.begin(), members.begin() + train);
    split.validation.insert(split.validation.end(), members.begin() + train, members.begin() + train + validation);
    split.test.insert(split.test.end(), members.begin() + train + validation, members.end());
  }
  for (std::vector<Index>* part : {&split.train, &split.validation, &split.test}) std::sort(part->begin(), part->end());
  return split;
}

}  // namespace implicit
