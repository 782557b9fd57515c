// libFuzzer harness: the graph loader (ParseGraphCsv, lib/src/graph_data.cc).
// The input is "<nodes text>|<edges text>" (no '|': nodes text only), read
// once with the default cleaning and once raw (no symmetrizing, self-loops
// kept). Any text must either be rejected with std::runtime_error or give a
// graph whose CSR lists are well formed: offsets from 0 to the number of
// entries, each list sorted, unique and in range; symmetric and without
// self-loops when cleaned; labels in 0..3; finite features.
#include "fuzz_check.h"

#include <implicit/core/graph_data.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace {

using implicit::Index;

bool HasEdge(const implicit::GraphDataset& g, Index i, Index j) {
  return std::binary_search(g.neighbors.begin() + g.row_offsets[i],
                            g.neighbors.begin() + g.row_offsets[i + 1], j);
}

void CheckGraph(const implicit::GraphDataset& g, bool cleaned) {
  using implicit_fuzz::Check;
  const Index n = g.num_nodes();
  Check(n > 0, "at least one node");
  Check(g.features.cols() == n && g.features.rows() > 0 && g.features.allFinite(),
        "finite d x N features");
  for (int label : g.labels) Check(label >= 0 && label <= 3, "labels in 0..3");
  Check(g.row_offsets.size() == static_cast<std::size_t>(n) + 1, "N + 1 offsets");
  Check(g.row_offsets.front() == 0 && g.row_offsets.back() == g.num_edges(), "offsets span the lists");
  for (Index i = 0; i < n; ++i) {
    Check(g.row_offsets[i] <= g.row_offsets[i + 1], "offsets non-decreasing");
    for (Index k = g.row_offsets[i]; k < g.row_offsets[i + 1]; ++k) {
      const Index j = g.neighbors[k];
      Check(j >= 0 && j < n, "neighbours in range");
      Check(k == g.row_offsets[i] || g.neighbors[k - 1] < j, "neighbour lists sorted and unique");
      if (cleaned) {
        Check(j != i, "no self-loops after cleaning");
        Check(HasEdge(g, j, i), "symmetric after cleaning");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t bar = input.find('|');
  const std::string nodes = input.substr(0, bar);
  const std::string edges = bar == std::string::npos ? std::string() : input.substr(bar + 1);
  implicit::GraphLoadOptions raw;
  raw.symmetrize = false;
  raw.keep_self_loops = true;
  try {
    CheckGraph(implicit::ParseGraphCsv(nodes, edges, "nodes", "edges"), true);
    CheckGraph(implicit::ParseGraphCsv(nodes, edges, "nodes", "edges", raw), false);
  } catch (const std::runtime_error&) {
    // rejected: the documented outcome for a malformed file
  }
  return 0;
}
