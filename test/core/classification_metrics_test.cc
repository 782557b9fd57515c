// Detection scores checked against their definitions computed another way:
// AUROC as the fraction of positive-negative pairs ranked correctly (ties 1/2),
// average precision as the mean precision at each positive's rank (no ties),
// macro-F1 from the confusion matrix; the chosen threshold beats every other
// candidate. Stratified splits partition the indices, keep each class's
// proportions and are reproducible by seed.
#define BOOST_TEST_MODULE classification_metrics
#include <boost/test/unit_test.hpp>

#include <implicit/core/classification_metrics.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

struct Data {
  std::vector<double> scores;
  std::vector<int> labels;
};

// Positives score higher on average; `levels` > 0 rounds the scores so that ties occur.
Data RandomData(int n, double prevalence, int levels, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::bernoulli_distribution positive(prevalence);
  Data d;
  for (int i = 0; i < n; ++i) {
    const int y = (i == 0) ? 1 : (i == 1) ? 0 : positive(random);
    double s = noise(random) + 1.2 * y;
    if (levels > 0) s = std::round(s * levels) / levels;
    d.scores.push_back(s);
    d.labels.push_back(y);
  }
  return d;
}

double PairwiseAuroc(const Data& d) {
  double correct = 0, pairs = 0;
  for (std::size_t i = 0; i < d.scores.size(); ++i)
    for (std::size_t j = 0; j < d.scores.size(); ++j)
      if (d.labels[i] == 1 && d.labels[j] == 0) {
        pairs += 1;
        correct += d.scores[i] > d.scores[j] ? 1.0 : d.scores[i] == d.scores[j] ? 0.5 : 0.0;
      }
  return correct / pairs;
}

double MeanPrecisionAtPositives(const Data& d) {
  double sum = 0;
  int positives = 0;
  for (std::size_t i = 0; i < d.scores.size(); ++i) {
    if (d.labels[i] != 1) continue;
    ++positives;
    int above = 0, positives_above = 0;  // ranked at or above i
    for (std::size_t j = 0; j < d.scores.size(); ++j)
      if (d.scores[j] >= d.scores[i]) {
        ++above;
        positives_above += d.labels[j];
      }
    sum += static_cast<double>(positives_above) / above;
  }
  return sum / positives;
}

double ConfusionMacroF1(const Data& d, double threshold) {
  double tp = 0, fp = 0, fn = 0, tn = 0;
  for (std::size_t i = 0; i < d.scores.size(); ++i) {
    const bool p = d.scores[i] >= threshold;
    if (d.labels[i]) (p ? tp : fn) += 1;
    else (p ? fp : tn) += 1;
  }
  const double f1_pos = tp > 0 ? tp / (tp + 0.5 * (fp + fn)) : 0.0;
  const double f1_neg = tn > 0 ? tn / (tn + 0.5 * (fp + fn)) : 0.0;
  return 0.5 * (f1_pos + f1_neg);
}

}  // namespace

BOOST_AUTO_TEST_CASE(auroc_is_the_fraction_of_correctly_ranked_pairs) {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    for (int levels : {0, 2}) {
      const Data d = RandomData(120, 0.1 * seed, levels, seed);
      BOOST_TEST(implicit::Auroc(d.scores, d.labels) == PairwiseAuroc(d), boost::test_tools::tolerance(1e-12));
      // Invariant under a strictly increasing transform of the scores.
      Data e = d;
      for (double& s : e.scores) s = std::exp(0.5 * s) - 3;
      BOOST_TEST(implicit::Auroc(e.scores, e.labels) == implicit::Auroc(d.scores, d.labels),
                 boost::test_tools::tolerance(1e-12));
    }
  }
  const std::vector<int> y = {0, 1, 0, 1, 1};
  BOOST_TEST(implicit::Auroc({1, 5, 2, 4, 3}, y) == 1.0);
  BOOST_TEST(implicit::Auroc({5, 1, 4, 2, 3}, y) == 0.0);
  BOOST_TEST(implicit::Auroc({7, 7, 7, 7, 7}, y) == 0.5);
}

BOOST_AUTO_TEST_CASE(average_precision_is_the_mean_precision_at_the_positives) {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const Data d = RandomData(150, 0.05 * seed, 0, 10 + seed);  // continuous scores: no ties
    BOOST_TEST(implicit::AveragePrecision(d.scores, d.labels) == MeanPrecisionAtPositives(d),
               boost::test_tools::tolerance(1e-12));
  }
  const std::vector<int> y = {0, 1, 0, 1, 1};
  BOOST_TEST(implicit::AveragePrecision({1, 5, 2, 4, 3}, y) == 1.0);
  // All scores tied: one threshold, precision = prevalence.
  BOOST_TEST(implicit::AveragePrecision({2, 2, 2, 2, 2}, y) == 0.6, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(macro_f1_and_its_best_threshold) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const Data d = RandomData(90, 0.2, seed % 2 ? 3 : 0, 20 + seed);
    const double best = implicit::BestMacroF1Threshold(d.scores, d.labels);
    const double best_f1 = implicit::MacroF1(d.scores, d.labels, best);
    BOOST_TEST(best_f1 == ConfusionMacroF1(d, best), boost::test_tools::tolerance(1e-12));
    BOOST_TEST(std::count(d.scores.begin(), d.scores.end(), best) > 0);  // one of the scores
    for (double t : d.scores) BOOST_TEST(implicit::MacroF1(d.scores, d.labels, t) <= best_f1 + 1e-12);
  }
  // By hand: threshold 0.5 gives tp 2, fn 1, fp 1, tn 2: F1 = 2/3 for both classes.
  BOOST_TEST(implicit::MacroF1({0.9, 0.8, 0.1, 0.7, 0.2, 0.3}, {1, 1, 1, 0, 0, 0}, 0.5) == 2.0 / 3,
             boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_named) {
  BOOST_CHECK_THROW(implicit::Auroc({1, 2}, {1}), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::Auroc({1, 2}, {1, 1}), std::invalid_argument);   // no negatives
  BOOST_CHECK_THROW(implicit::Auroc({1, 2}, {0, 2}), std::invalid_argument);   // not 0/1
  BOOST_CHECK_THROW(implicit::AveragePrecision({1, NAN}, {0, 1}), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::StratifiedSplit({0, 1}, 0.0, 0.1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::StratifiedSplit({0, 1}, 0.6, 0.4, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(stratified_split_partitions_and_keeps_proportions) {
  std::vector<int> labels;
  for (int i = 0; i < 1000; ++i) labels.push_back(i % 50 == 0 ? 1 : 0);  // 20 positives
  for (double train_ratio : {0.4, 0.01}) {
    const implicit::DataSplit s = implicit::StratifiedSplit(labels, train_ratio, 0.2, 7);
    std::vector<implicit::Index> all;
    for (const auto* part : {&s.train, &s.validation, &s.test}) {
      BOOST_TEST(std::is_sorted(part->begin(), part->end()));
      all.insert(all.end(), part->begin(), part->end());
    }
    std::sort(all.begin(), all.end());
    BOOST_TEST(all.size() == labels.size());
    BOOST_TEST((std::adjacent_find(all.begin(), all.end()) == all.end()));  // disjoint
    auto positives = [&](const std::vector<implicit::Index>& part) {
      int c = 0;
      for (implicit::Index i : part) c += labels[i];
      return c;
    };
    BOOST_TEST(positives(s.train) == std::max(1L, std::lround(train_ratio * 20)));
    BOOST_TEST(positives(s.validation) == 4);
    BOOST_TEST(static_cast<long>(s.train.size()) ==
               std::max(1L, std::lround(train_ratio * 20)) + std::max(1L, std::lround(train_ratio * 980)));
  }
  const auto a = implicit::StratifiedSplit(labels, 0.4, 0.2, 7), b = implicit::StratifiedSplit(labels, 0.4, 0.2, 7),
             c = implicit::StratifiedSplit(labels, 0.4, 0.2, 8);
  BOOST_TEST(a.train == b.train);
  BOOST_TEST(a.test == b.test);
  BOOST_TEST(a.train != c.train);
}
