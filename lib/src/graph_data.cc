// Loading attributed graphs (see graph_data.h).
#include <implicit/core/graph_data.h>

#include "data_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace implicit {
namespace {

bool IsComment(const std::string& line) {
  const std::size_t first = line.find_first_not_of(" \t");
  return first != std::string::npos && line[first] == '#';
}

// Calls visit(line_number, fields) for every data line; `fail(line, what)` throws.
struct CsvFile {
  const std::string& text;
  const std::string& source;
  const char* kind;

  [[noreturn]] void Fail(int line_number, const std::string& what) const {
    throw std::runtime_error("malformed " + std::string(kind) + " '" + source + "', line " +
                             std::to_string(line_number) + ": " + what);
  }
  template <typename Visit>
  void ForEachRow(Visit visit) const {
    data_files::ForEachLine(text, [&](int line_number, const std::string& line) {
      if (!IsComment(line)) visit(line_number, data_files::SplitFields(line));
    });
  }
};

void ReadNodes(const CsvFile& file, const GraphLoadOptions& options, std::vector<int>* labels,
               std::vector<double>* values, Index* dimension) {
  file.ForEachRow([&](int line_number, const std::vector<std::string>& fields) {
    if (labels->empty()) {
      if (fields.size() < 2) file.Fail(line_number, "expected a label and at least one feature");
      *dimension = static_cast<Index>(fields.size()) - 1;
    } else if (static_cast<Index>(fields.size()) != *dimension + 1) {
      file.Fail(line_number, "expected " + std::to_string(*dimension + 1) + " columns (as on the first row), got " +
                                 std::to_string(fields.size()));
    }
    long label = 0;
    if (!data_files::ParseInteger(fields[0], &label))
      file.Fail(line_number, "column 1: label " + data_files::Excerpt(fields[0]) + " is not an integer");
    if (label < 0 || label > options.max_label)
      file.Fail(line_number, "column 1: label " + std::to_string(label) + " outside 0.." +
                                 std::to_string(options.max_label));
    labels->push_back(static_cast<int>(label));
    for (std::size_t c = 1; c < fields.size(); ++c) {
      double v = 0;
      if (!data_files::ParseFiniteReal(fields[c], &v))
        file.Fail(line_number, "column " + std::to_string(c + 1) + ": " + data_files::Excerpt(fields[c]) +
                                   " is not a finite number");
      values->push_back(v);
    }
  });
  if (labels->empty()) throw std::runtime_error(std::string(file.kind) + " '" + file.source + "' contains no nodes");
}

std::vector<std::pair<Index, Index>> ReadEdges(const CsvFile& file, Index num_nodes) {
  std::vector<std::pair<Index, Index>> edges;
  file.ForEachRow([&](int line_number, const std::vector<std::string>& fields) {
    if (fields.size() != 2)
      file.Fail(line_number, "expected 2 columns (source,target), got " + std::to_string(fields.size()));
    Index ends[2];
    for (int c = 0; c < 2; ++c) {
      long v = 0;
      if (!data_files::ParseInteger(fields[c], &v))
        file.Fail(line_number, "column " + std::to_string(c + 1) + ": " + data_files::Excerpt(fields[c]) +
                                   " is not an integer");
      if (v < 0 || v >= num_nodes)
        file.Fail(line_number, "column " + std::to_string(c + 1) + ": node " + std::to_string(v) +
                                   " outside 0.." + std::to_string(num_nodes - 1));
      ends[c] = static_cast<Index>(v);
    }
    edges.emplace_back(ends[0], ends[1]);
  });
  return edges;
}

// Cleans the rows (see graph_data.h) and builds the CSR lists.
void BuildAdjacency(std::vector<std::pair<Index, Index>> rows, Index num_nodes,
                    const GraphLoadOptions& options, GraphDataset* g) {
  GraphCleaning& c = g->cleaning;
  c.edge_rows = static_cast<Index>(rows.size());
  std::sort(rows.begin(), rows.end());
  const auto unique_end = std::unique(rows.begin(), rows.end());
  c.duplicate_rows = static_cast<Index>(rows.end() - unique_end);
  rows.erase(unique_end, rows.end());
  if (!options.keep_self_loops) {
    const auto kept_end = std::remove_if(rows.begin(), rows.end(),
                                         [](const std::pair<Index, Index>& e) { return e.first == e.second; });
    c.self_loops_dropped = static_cast<Index>(rows.end() - kept_end);
    rows.erase(kept_end, rows.end());
  }
  if (options.symmetrize) {
    std::vector<std::pair<Index, Index>> added;
    for (const auto& e : rows) {
      const std::pair<Index, Index> reverse(e.second, e.first);
      if (!std::binary_search(rows.begin(), rows.end(), reverse)) added.push_back(reverse);
    }
    c.reverse_edges_added = static_cast<Index>(added.size());
    rows.insert(rows.end(), added.begin(), added.end());
    std::sort(rows.begin(), rows.end());
  }
  g->row_offsets.assign(static_cast<std::size_t>(num_nodes) + 1, 0);
  for (const auto& e : rows) ++g->row_offsets[static_cast<std::size_t>(e.first) + 1];
  for (Index i = 0; i < num_nodes; ++i) g->row_offsets[i + 1] += g->row_offsets[i];
  g->neighbors.resize(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) g->neighbors[k] = rows[k].second;  // rows are sorted
}

void RequireReadable(const std::string& path, const char* kind) {
  if (path.empty()) throw std::runtime_error(std::string(kind) + ": empty path");
  if (::access(path.c_str(), R_OK) != 0)
    throw std::runtime_error("cannot open " + std::string(kind) + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

Index GraphDataset::num_anomalies() const {
  return static_cast<Index>(std::count_if(labels.begin(), labels.end(), [](int l) { return l > 0; }));
}

GraphDataset ParseGraphCsv(const std::string& nodes_text, const std::string& edges_text,
                           const std::string& nodes_source, const std::string& edges_source,
                           const GraphLoadOptions& options) {
  if (options.max_label < 1)
    throw std::invalid_argument("GraphLoadOptions::max_label must be >= 1, got " +
                                std::to_string(options.max_label));
  GraphDataset g;
  std::vector<double> values;
  Index dimension = 0;
  ReadNodes(CsvFile{nodes_text, nodes_source, "graph nodes file"}, options, &g.labels, &values, &dimension);
  const Index n = g.num_nodes();
  g.features = Eigen::Map<const Matrix<double>>(values.data(), dimension, n);
  BuildAdjacency(ReadEdges(CsvFile{edges_text, edges_source, "graph edges file"}, n), n, options, &g);
  g.source = nodes_source + " + " + edges_source;
  return g;
}

GraphDataset LoadGraph(const std::string& nodes_path, const std::string& edges_path,
                       const GraphLoadOptions& options) {
  RequireReadable(nodes_path, "graph nodes file");
  RequireReadable(edges_path, "graph edges file");
  return ParseGraphCsv(data_files::ReadCompressedOrPlain(nodes_path, "graph nodes file"),
                       data_files::ReadCompressedOrPlain(edges_path, "graph edges file"), nodes_path,
                       edges_path, options);
}

}  // namespace implicit
