// The graph loader: the shipped graphs have the sizes, feature dimensions and
// anomaly counts their README states; the cleaning of the edge rows does what
// graph_data.h says (duplicates once, self-loops dropped or kept, reverses
// added) and gives sorted, unique, in-range, symmetric CSR lists; malformed
// files are rejected naming the file and the line.
#define BOOST_TEST_MODULE graph_data
#include <boost/test/unit_test.hpp>

#include <implicit/core/graph_data.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

using implicit::GraphDataset;
using implicit::Index;

std::string Shipped(const std::string& name, const std::string& part) {
  return std::string(IMPLICIT_DATA_DIR) + "/graphs/" + name + "." + part + ".csv.gz";
}

GraphDataset LoadShipped(const std::string& name, const implicit::GraphLoadOptions& options = {}) {
  return implicit::LoadGraph(Shipped(name, "nodes"), Shipped(name, "edges"), options);
}

GraphDataset Parse(const std::string& nodes, const std::string& edges,
                   const implicit::GraphLoadOptions& options = {}) {
  return implicit::ParseGraphCsv(nodes, edges, "nodes.csv", "edges.csv", options);
}

std::string ErrorOf(const std::string& nodes, const std::string& edges) {
  try {
    Parse(nodes, edges);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// The CSR lists are well formed: offsets non-decreasing from 0 to the number of
// entries, each list sorted, unique and in range.
void CheckCsr(const GraphDataset& g) {
  BOOST_REQUIRE(g.row_offsets.size() == static_cast<std::size_t>(g.num_nodes()) + 1);
  BOOST_TEST(g.row_offsets.front() == 0);
  BOOST_TEST(g.row_offsets.back() == g.num_edges());
  for (Index i = 0; i < g.num_nodes(); ++i) {
    BOOST_REQUIRE(g.row_offsets[i] <= g.row_offsets[i + 1]);
    for (Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k) {
      BOOST_REQUIRE(g.neighbors[k] >= 0);
      BOOST_REQUIRE(g.neighbors[k] < g.num_nodes());
      if (k > g.row_offsets[i]) BOOST_REQUIRE(g.neighbors[k - 1] < g.neighbors[k]);
    }
  }
}

bool HasEdge(const GraphDataset& g, Index i, Index j) {
  return std::binary_search(g.neighbors.begin() + g.row_offsets[i],
                            g.neighbors.begin() + g.row_offsets[i + 1], j);
}

bool IsSymmetric(const GraphDataset& g) {
  for (Index i = 0; i < g.num_nodes(); ++i)
    for (Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k)
      if (!HasEdge(g, g.neighbors[k], i)) return false;
  return true;
}

bool HasSelfLoop(const GraphDataset& g) {
  for (Index i = 0; i < g.num_nodes(); ++i)
    if (HasEdge(g, i, i)) return true;
  return false;
}

}  // namespace

// Sizes from data/graphs/README.md, an independent statement of the files.
BOOST_AUTO_TEST_CASE(shipped_graphs_match_their_readme) {
  struct Expect {
    std::string name;
    Index nodes, rows, features, anomalies;
  };
  for (const Expect& e : {Expect{"gen_1000", 1000, 4936, 64, 20}, Expect{"inj_cora", 2708, 11060, 1433, 138},
                          Expect{"reddit", 10984, 168016, 64, 366}}) {
    BOOST_TEST_CONTEXT(e.name) {
      const GraphDataset g = LoadShipped(e.name);
      BOOST_TEST(g.num_nodes() == e.nodes);
      BOOST_TEST(g.cleaning.edge_rows == e.rows);
      BOOST_TEST(g.feature_dimension() == e.features);
      BOOST_TEST(g.num_anomalies() == e.anomalies);
      BOOST_TEST(g.features.allFinite());
      CheckCsr(g);
      BOOST_TEST(IsSymmetric(g));
      BOOST_TEST(!HasSelfLoop(g));
      // Every row is accounted for: kept once, or a duplicate, or a dropped self-loop.
      const Index kept = g.num_edges() - g.cleaning.reverse_edges_added;
      BOOST_TEST(kept + g.cleaning.duplicate_rows + g.cleaning.self_loops_dropped == e.rows);
    }
  }
  // README: reddit lists both directions of every edge and a self-loop at every node.
  const GraphDataset reddit = LoadShipped("reddit");
  BOOST_TEST(reddit.cleaning.self_loops_dropped == 10984);
  BOOST_TEST(reddit.cleaning.reverse_edges_added == 0);
  // README: inj_cora has 6 duplicate rows and 94 rows without their reverse.
  const GraphDataset cora = LoadShipped("inj_cora");
  BOOST_TEST(cora.cleaning.duplicate_rows == 6);
  BOOST_TEST(cora.cleaning.reverse_edges_added == 94);
}

BOOST_AUTO_TEST_CASE(cleaning_options_do_what_they_say) {
  // 4 nodes: rows 0->1 (twice), 1->0, 1->2 (no reverse), 3->3 (self-loop).
  const std::string nodes = "# label,x0,x1\n0,1,2\n1,3,4\n\n0,5,6\r\n2,7,8\n";
  const std::string edges = "# source,target\n0,1\n0,1\n1,0\n1,2\n3,3\n";
  const GraphDataset g = Parse(nodes, edges);
  CheckCsr(g);
  BOOST_TEST(g.num_nodes() == 4);
  BOOST_TEST(g.feature_dimension() == 2);
  BOOST_TEST(g.features(1, 3) == 8.0);
  BOOST_TEST((g.labels == std::vector<int>{0, 1, 0, 2}));
  BOOST_TEST(g.num_anomalies() == 2);
  BOOST_TEST(g.cleaning.edge_rows == 5);
  BOOST_TEST(g.cleaning.duplicate_rows == 1);
  BOOST_TEST(g.cleaning.self_loops_dropped == 1);
  BOOST_TEST(g.cleaning.reverse_edges_added == 1);
  BOOST_TEST(g.num_edges() == 4);  // 0-1, 1-0, 1-2, 2-1
  BOOST_TEST(HasEdge(g, 2, 1));
  BOOST_TEST(g.degree(3) == 0);    // isolated after dropping its self-loop
  BOOST_TEST(IsSymmetric(g));

  implicit::GraphLoadOptions raw;
  raw.symmetrize = false;
  raw.keep_self_loops = true;
  const GraphDataset r = Parse(nodes, edges, raw);
  CheckCsr(r);
  BOOST_TEST(r.num_edges() == 4);  // 0-1, 1-0, 1-2, 3-3
  BOOST_TEST(!HasEdge(r, 2, 1));
  BOOST_TEST(HasEdge(r, 3, 3));
  BOOST_TEST(r.cleaning.reverse_edges_added == 0);
  BOOST_TEST(r.cleaning.self_loops_dropped == 0);
  // No edges at all is a valid graph of isolated nodes.
  const GraphDataset isolated = Parse(nodes, "# source,target\n");
  BOOST_TEST(isolated.num_edges() == 0);
  CheckCsr(isolated);
}

BOOST_AUTO_TEST_CASE(malformed_files_name_the_file_and_line) {
  struct Case {
    std::string nodes, edges, expect;
  };
  const std::string nodes = "0,1,2\n1,3,4\n";
  const std::string edges = "0,1\n";
  const Case cases[] = {
      {"0,1,2\n1,3\n", edges, "'nodes.csv', line 2: expected 3 columns"},
      {"0\n", edges, "'nodes.csv', line 1: expected a label and at least one feature"},
      {"0,1,2\n4,3,4\n", edges, "line 2: column 1: label 4 outside 0..3"},
      {"0,1,2\n-1,3,4\n", edges, "label -1 outside"},
      {"0,1,2\nx,3,4\n", edges, "line 2: column 1: label 'x' is not an integer"},
      {"0,1,2\n1,3,nan\n", edges, "line 2: column 3: 'nan' is not a finite number"},
      {"0,1,2\n1,3,1e999\n", edges, "is not a finite number"},
      {"0,1,2\n1,3,\n", edges, "line 2: column 3: '' is not a finite number"},
      {"# only a header\n", edges, "'nodes.csv' contains no nodes"},
      {nodes, "0,2\n", "'edges.csv', line 1: column 2: node 2 outside 0..1"},
      {nodes, "# h\n0,1\n-1,0\n", "'edges.csv', line 3: column 1: node -1 outside"},
      {nodes, "0,1,1\n", "line 1: expected 2 columns (source,target), got 3"},
      {nodes, "0;1\n", "expected 2 columns"},
      {nodes, "0,1.5\n", "column 2: '1.5' is not an integer"},
  };
  for (const Case& c : cases) {
    const std::string m = ErrorOf(c.nodes, c.edges);
    BOOST_TEST_INFO(m);
    BOOST_TEST(m.find(c.expect) != std::string::npos);
  }
  // A huge field is quoted as a short excerpt, not copied whole.
  const std::string m = ErrorOf("0,1,2\n1,3," + std::string(1 << 20, 'z') + "\n", edges);
  BOOST_TEST(m.find("is not a finite number") != std::string::npos);
  BOOST_TEST(m.size() < 300u);
}

BOOST_AUTO_TEST_CASE(missing_files_are_named) {
  for (const auto& paths : {std::make_pair(std::string("/nonexistent/a.nodes.csv"), Shipped("gen_1000", "edges")),
                            std::make_pair(Shipped("gen_1000", "nodes"), std::string("/nonexistent/b.edges.csv"))}) {
    std::string m;
    try {
      implicit::LoadGraph(paths.first, paths.second);
    } catch (const std::runtime_error& e) {
      m = e.what();
    }
    BOOST_TEST_INFO(m);
    BOOST_TEST(m.find("cannot open graph") != std::string::npos);
    BOOST_TEST(m.find("/nonexistent/") != std::string::npos);
  }
  BOOST_CHECK_THROW(implicit::LoadGraph("", Shipped("gen_1000", "edges")), std::runtime_error);
  implicit::GraphLoadOptions bad;
  bad.max_label = 0;
  BOOST_CHECK_THROW(Parse("0,1\n", "", bad), std::invalid_argument);
}
