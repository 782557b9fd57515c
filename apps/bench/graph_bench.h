// implicit-bench --graph-et: what the graph Energy Transformer's products cost
// on the shipped graphs, and how that grows with the graph.
//
// For each graph it builds the ET that implicit-graph's "et" detector trains
// (graph/et_detector.h defaults: D 16, 2 heads of 8, 32 memories) with a
// random input c and times, on the whole graph (one sample): the map
// f(x) = x - a dE/dg with E (what a forward iteration costs), the
// vector-Jacobian product u^T df/dx (an adjoint iteration) and the parameter
// product u^T df/dtheta (once per training step); each as the median of
// --repeat calls, also per directed edge. Every figure is measured in the same
// run on this machine.
#pragma once

#include "common/json_output.h"

#include <string>
#include <vector>

namespace implicit_apps {

struct GraphBenchOptions {
  std::vector<std::string> graphs = {"gen_1000", "inj_cora", "reddit"};
  long repeat = 5;
  bool quiet = false;
};

// Runs the measurements, prints the table and returns every number.
Json RunGraphBench(const GraphBenchOptions& options);

}  // namespace implicit_apps
