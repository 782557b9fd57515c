// The graph detectors' own code (apps/graph/). implicit-graph's GCN baseline
// (gcn_detector.h): its scores equal the paper's dense formula
// w2 . relu(W1 X S^T + b1) S^T + b2 with S = D^-1/2 (A + I) D^-1/2 built
// another way (a dense matrix from the edge list), on a graph with an isolated
// node, a stored self-loop and a one-directional edge row; its gradient
// matches central differences; and trained on gen_1000 it ranks the held-out
// anomalies better than chance. The ET's propagated input (node_features.h's
// WithPropagated) equals the same dense S applied hop by hop. The ET
// detector's readout (et_detector.h): Gather and Scatter are adjoint, and the
// readout's gradient, linear or through its hidden layer, matches central
// differences.
#define BOOST_TEST_MODULE graph_detectors
#include <boost/test/unit_test.hpp>

#include "graph/et_detector.h"
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

// S = D^-1/2 (A + I) D^-1/2 of SmallGraph, dense, from kRows.
Matrix DenseNormalizedAdjacency(Index n) {
  Matrix s = Matrix::Identity(n, n);
  for (const auto& [i, j] : kRows) s(i, j) += 1.0;
  const Vector degree = s.rowwise().sum();
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j) s(i, j) /= std::sqrt(degree(i) * degree(j));
  return s;
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
  const Matrix s = DenseNormalizedAdjacency(n);
  BOOST_TEST(s(4, 4) == 1.0);  // the isolated node averages itself only
  auto& p = gcn.parameters();
  Matrix hidden = p.Block("W1") * x * s.transpose();
  hidden.colwise() += Vector(p.Block("b1"));
  const Vector expected =
      (hidden.cwiseMax(0.0) * s.transpose()).transpose() * Vector(p.Block("w2")) +
      Vector::Constant(n, p.Block("b2")(0, 0));
  BOOST_TEST((gcn.Forward() - expected).norm() <= 1e-12 * expected.norm());
}

// The ET's propagated input (--et-hops): [x; x S^T; x S^T S^T] with the same
// dense S; no hops is x itself, negative hops are refused.
BOOST_AUTO_TEST_CASE(propagated_features_equal_the_dense_formula) {
  const implicit::GraphDataset g = SmallGraph();
  const Index n = g.num_nodes();
  const Matrix x = RandomMatrix<double>(3, n, 3);
  const Matrix s = DenseNormalizedAdjacency(n);
  Matrix expected(9, n);
  expected << x, x * s.transpose(), x * s.transpose() * s.transpose();
  const Matrix propagated = implicit_apps::WithPropagated(g, x, 2);
  BOOST_TEST((propagated - expected).norm() <= 1e-12 * expected.norm());
  BOOST_TEST((implicit_apps::WithPropagated(g, x, 0) - x).norm() == 0.0);
  BOOST_CHECK_THROW(implicit_apps::WithPropagated(g, x, -1), std::invalid_argument);
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

namespace {

// The detector's ET made small: D 4, its two heads of 2, three memories.
implicit::GraphEnergyTransformerOptions SmallEnergy() {
  implicit::GraphEnergyTransformerOptions e = implicit_apps::EtDetector::DefaultEnergy();
  e.node_dim = 4, e.head_dim = 2, e.num_memories = 3;
  return e;
}

}  // namespace

BOOST_AUTO_TEST_CASE(et_readout_gather_and_scatter_are_adjoint) {
  const implicit::GraphDataset g = SmallGraph();
  const implicit::GraphEnergyTransformer<double> et(SmallEnergy(), g.row_offsets, g.neighbors);
  const Index n = g.num_nodes(), D = et.node_dim(), T = et.num_node_terms();
  const implicit_apps::EtDetector::Readout readout(implicit_apps::EtReadout::kStatesEnergies, et, 0);
  const Matrix state = RandomMatrix<double>(n * D, 1, 6), terms = RandomMatrix<double>(n * T, 1, 7);
  const Matrix read = readout.Gather(state, terms);
  const Matrix m = RandomMatrix<double>(read.rows(), read.cols(), 8);
  Matrix grad_state = Matrix::Zero(n * D, 1), grad_terms = Matrix::Zero(n * T, 1);
  readout.Scatter(m, &grad_state, &grad_terms);
  const double lhs = (read.array() * m.array()).sum();
  const double rhs = (state.array() * grad_state.array()).sum() + (terms.array() * grad_terms.array()).sum();
  BOOST_TEST(std::abs(lhs - rhs) <= 1e-12 * std::abs(lhs));
  // The rows before the forces' terms (LayerNorm, input) are not read.
  BOOST_TEST(read.rows() == D + T - et.kFirstHeadTerm);
  BOOST_TEST(Eigen::Map<const Matrix>(grad_terms.data(), T, n).topRows(et.kFirstHeadTerm).norm() == 0.0);
}

BOOST_AUTO_TEST_CASE(et_readout_gradient_matches_central_differences) {
  const implicit::GraphDataset g = SmallGraph();
  const implicit::GraphEnergyTransformer<double> et(SmallEnergy(), g.row_offsets, g.neighbors);
  const Index n = g.num_nodes();
  const std::vector<Index> nodes = {0, 2, 3, 5};
  const std::vector<double> grad_scores = {0.3, -1.2, 0.7, 0.5};
  for (const Index hidden : {0, 3}) {
    BOOST_TEST_CONTEXT("hidden units " << hidden) {
      const implicit_apps::EtDetector::Readout readout(implicit_apps::EtReadout::kStatesEnergies, et, hidden);
      implicit::ParameterSet<double> head;
      readout.AddParameters(&head);
      head.values() = RandomMatrix<double>(head.size(), 1, 9);
      Matrix read = RandomMatrix<double>(et.node_dim() + et.num_node_terms() - et.kFirstHeadTerm, n, 10);
      // L = sum_k grad_scores[k] score(nodes[k]), its derivatives and their central differences.
      const auto loss = [&] {
        const std::vector<double> scores = readout.Scores(head, read);
        double l = 0;
        for (std::size_t k = 0; k < nodes.size(); ++k) l += grad_scores[k] * scores[nodes[k]];
        return l;
      };
      Vector grad_head = Vector::Zero(head.size());
      const Matrix grad_read = readout.Backward(head, read, nodes, grad_scores, &grad_head);
      const double h = 1e-6;
      const auto central = [&](double* v) {
        const double at = *v;
        *v = at + h;
        const double plus = loss();
        *v = at - h;
        const double minus = loss();
        *v = at;
        return (plus - minus) / (2 * h);
      };
      Vector numeric_head(head.size());
      for (Index k = 0; k < head.size(); ++k) numeric_head(k) = central(&head.values()(k));
      Matrix numeric_read(read.rows(), read.cols());
      for (Index k = 0; k < read.size(); ++k) numeric_read.data()[k] = central(read.data() + k);
      BOOST_TEST((grad_head - numeric_head).norm() <= 1e-7 * numeric_head.norm());
      BOOST_TEST((grad_read - numeric_read).norm() <= 1e-7 * numeric_read.norm());
      BOOST_TEST(grad_read.col(1).norm() == 0.0);  // a node without a loss term
    }
  }
}
