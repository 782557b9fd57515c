/// \file
/// Attributed graphs with node anomaly labels (data/graphs: reddit, inj_cora,
/// gen_1000; see data/graphs/README.md), read into node features, labels and a
/// compressed sparse row (CSR) adjacency.
///
/// Files: NAME.nodes.csv.gz has one row per node (row i = node i),
/// `label,x0,x1,...`, with an integer label 0..max_label (0 = normal, any
/// label > 0 an anomaly) and the same number of finite real features on every
/// row; NAME.edges.csv.gz has one directed edge `source,target` per row, 0-based
/// node indices. Lines starting with '#' are comments; blank lines are skipped;
/// gzip or plain text. Any other content (a wrong column count, a label out of
/// range, a non-finite feature, a node index out of range, no nodes at all)
/// throws std::runtime_error naming the file and the line.
///
/// The edge rows are cleaned as follows, and counted in GraphDataset::cleaning:
///  - a row repeated exactly (same source and target) is kept once;
///  - a self-loop (i, i) is dropped unless options.keep_self_loops;
///  - with options.symmetrize (the default), the reverse (j, i) of every row
///    (i, j) is added where the file lacks it, so the adjacency is symmetric.
///
/// The result lists each node's neighbours (targets) sorted and unique.
///
/// \code
///   implicit::GraphDataset g = implicit::LoadGraph("data/graphs/inj_cora.nodes.csv.gz",
///                                                  "data/graphs/inj_cora.edges.csv.gz");
///   for (implicit::Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k)
///     visit(g.neighbors[k]);                    // the neighbours of node i
///   bool anomalous = g.IsAnomaly(i);            // labels[i] > 0
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <string>
#include <vector>

namespace implicit {

/// How LoadGraph and ParseGraphCsv read a graph.
struct GraphLoadOptions {
  /// Add the reverse of every edge row whose reverse the file lacks (default true).
  bool symmetrize = true;
  /// Keep rows (i, i); dropped by default (layers add a node's own term explicitly).
  bool keep_self_loops = false;
  /// Largest valid label, >= 1 (default 3, as in the injected-anomaly sets:
  /// 1 contextual, 2 structural, 3 both).
  int max_label = 3;
};

/// What the cleaning of the edge rows did (see the file comment).
struct GraphCleaning {
  Index edge_rows = 0;           ///< rows in the edges file
  Index duplicate_rows = 0;      ///< exact repeats of an earlier row, dropped
  Index self_loops_dropped = 0;  ///< rows (i, i) dropped (keep_self_loops false)
  Index reverse_edges_added = 0; ///< (j, i) added for a row (i, j) without its reverse
};

/// An attributed graph with node labels: features, labels and a CSR adjacency.
struct GraphDataset {
  Matrix<double> features;         ///< d x N: column i holds node i's features
  std::vector<int> labels;         ///< N labels as in the file (0 = normal)
  std::vector<Index> row_offsets;  ///< N + 1 offsets into neighbors (CSR)
  std::vector<Index> neighbors;    ///< the neighbours of node i: [row_offsets[i], row_offsets[i+1])
  GraphCleaning cleaning;          ///< What the cleaning of the edge rows did.
  std::string source;              ///< `"<nodes file> + <edges file>"`

  /// The number N of nodes.
  Index num_nodes() const { return static_cast<Index>(labels.size()); }
  /// The number d of features per node.
  Index feature_dimension() const { return features.rows(); }
  /// Stored directed edges (a symmetric edge counts twice).
  Index num_edges() const { return static_cast<Index>(neighbors.size()); }
  /// The number of neighbours of node i.
  Index degree(Index i) const { return row_offsets[i + 1] - row_offsets[i]; }
  /// Whether node i is an anomaly (labels[i] > 0).
  bool IsAnomaly(Index i) const { return labels[i] > 0; }
  /// The number of anomalous nodes (label > 0).
  Index num_anomalies() const;
};

/// Reads NAME.nodes.csv.gz and NAME.edges.csv.gz (gzip or plain).
/// \throws std::runtime_error naming the file (and line) on any problem.
/// \throws std::invalid_argument when options.max_label < 1.
GraphDataset LoadGraph(const std::string& nodes_path, const std::string& edges_path,
                       const GraphLoadOptions& options = {});

/// The same as LoadGraph from text already in memory; the sources name the
/// texts in errors.
/// \throws std::runtime_error naming the source and line on malformed contents.
/// \throws std::invalid_argument when options.max_label < 1.
GraphDataset ParseGraphCsv(const std::string& nodes_text, const std::string& edges_text,
                           const std::string& nodes_source, const std::string& edges_source,
                           const GraphLoadOptions& options = {});

}  // namespace implicit
