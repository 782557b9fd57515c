// implicit-graph's GCN baseline (apps/graph/gcn_detector.h): its scores equal
// the paper's dense formula w2 . relu(W1 X S^T + b1) S^T + b2 with
// S = D^-1/2 (A + I) D^-1/2 built another way (a dense matrix from the edge
// list), on a graph with an isolated node, a stored self-loop and a
// one-directional edge row; its gradient matches central differences; and
// trained on gen_1000 it ranks the held-out anomalies better than chance.
#define BOOST_TEST_MODULE gcn_detector
#include <boost/test/unit_test.hpp>

#include "graph/gcn_detector.h"
#include "graph/node_features.h"
#include "support/test_problems.h"

#include <implicit/core/digits.h>

#include <string>
#include <utility>
#include <vector>

using implicit::Index;
using Matrix = implicit::Matrix<double>;
using Vector = implicit::Vector<double>;
using implicit::testing::RandomMatrix;
using implicit_apps::Gcn;

namespace {

// Node 4 isolated, a self-loop on 2, the row 3,1 without its reverse (the
// loader adds it), nodes 0..5.
const char* kNodes = "# label,x0,x1,x2\n0,1,0,2\n1,0,1,1\n0,2,2,0\n0,1,1,1\n1,0,3,1\n0,1,0,0\n";
const char* kEdges = "0,1\n1,0\n1,2\n2,1\n2,2\n3,1\n0,5\n5,0\n";
const std::vector<std::pair<int, int>> kRows = {{0, 1}, {1, 0}, {1, 2}, {2, 1}, {2, 2},
                                                {3, 1}, {1, 3}, {0, 5}, {5, 0}};

implicit::GraphDataset SmallGraph() {
  implicit::GraphLoadOptions options;
  options.keep_self_loops = true;
  return implicit::ParseGraphCsv(kNodes, kEdges, "nodes", "edges", options);
}

void RandomParameters(Gcn* gcn, unsigned seed) {
  gcn->parameters().values() = RandomMatrix<double>(gcn->parameters().size(), 1, seed);
}

}  // namespace

BOOST_AUTO_TEST_CASE(scores_equal_the_dense_formula) {
  const implicit::GraphDataset g = SmallGraph();
  const Index n = g.num_nodes();
  const Matrix x = RandomMatrix<double>(3, n, 1);
  Gcn gcn(g, x, 4);
  RandomParameters(&gcn, 2);
  Matrix s = Matrix::Identity(n, n);
  for (const auto& [i, j] : kRows) s(i, j) += 1.0;
  const Vector degree = s.rowwise().sum();
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) s(i, j) /= std::sqrt(degree(i) * degree(j));
  BOOST_TEST(s(4, 4) == 1.0);  // the isolated node averages itself only
  auto& p = gcn.parameters();
  Matrix hidden = p.Block("W1") * x * s.transpose();
  hidden.colwise() += Vector(p.Block("b1"));
  const Vector expected =
      (hidden.cwiseMax(0.0) * s.transpose()).transpose() * Vector(p.Block("w2")) +
      Vector::Constant(n, p.Block("b2")(0, 0));
  BOOST_TEST((gcn.Forward() - expected).norm() <= 1e-12 * expected.norm());
}

BOOST_AUTO_TEST_CASE(gradient_matches_central_differences) {
  const implicit::GraphDataset g = SmallGraph();
  const Matrix x = RandomMatrix<double>(3, g.num_nodes(), 3);
  Gcn gcn(g, x, 5);
  RandomParameters(&gcn, 4);
  const Vector weights = RandomMatrix<double>(g.num_nodes(), 1, 5);
  gcn.Forward();
  const Vector grad = gcn.Gradient(weights);
  const Vector at = gcn.parameters().values();
  const double h = 1e-6;
  Vector numeric(at.size());
  for (Index k = 0; k < at.size(); ++k) {
    gcn.parameters().values() = at;
    gcn.parameters().values()(k) += h;
    const double plus = weights.dot(gcn.Forward());
    gcn.parameters().values()(k) -= 2 * h;
    numeric(k) = (plus - weights.dot(gcn.Forward())) / (2 * h);
  }
  BOOST_TEST((grad - numeric).norm() <= 1e-7 * numeric.norm(), "analytic " << grad.transpose() << "\nnumeric "
                                                                     << numeric.transpose());
}

BOOST_AUTO_TEST_CASE(trained_on_gen_1000_beats_chance) {
  const std::string nodes = implicit::FindDataFile("graphs/gen_1000.nodes.csv.gz", {IMPLICIT_DATA_DIR});
  const std::string edges = implicit::FindDataFile("graphs/gen_1000.edges.csv.gz", {IMPLICIT_DATA_DIR});
  BOOST_REQUIRE(!nodes.empty() && !edges.empty());
  const implicit::GraphDataset g = implicit::LoadGraph(nodes, edges);
  std::vector<int> anomalous;
  for (int label : g.labels) anomalous.push_back(label > 0 ? 1 : 0);
  double mean_auroc = 0;
  const int seeds = 3;
  for (int seed = 1; seed <= seeds; ++seed) {
    const implicit::DataSplit split = implicit::StratifiedSplit(anomalous, 0.4, 0.2, seed);
    implicit_apps::GcnDetector::Options o;
    o.seed = static_cast<unsigned>(seed);
    const auto r = implicit_apps::GcnDetector(o).Train(g, implicit_apps::Standardize(g.features, split.train),
                                                       anomalous, split);
    BOOST_TEST(r.best_validation_auroc > 0.5);
    mean_auroc += implicit::Auroc(implicit_apps::Subset(r.scores, split.test),
                                  implicit_apps::Subset(anomalous, split.test)) / seeds;
  }
  BOOST_TEST(mean_auroc > 0.6);
}
