// implicit-bench --graph-et (graph_bench.h).
#include "bench/graph_bench.h"

#include "common/timing.h"
#include "common/data_paths.h"
#include "common/format.h"
#include "common/table.h"
#include "graph/et_detector.h"

#include <implicit/layers/graph_energy_transformer.h>

#include <cmath>
#include <iostream>
#include <random>

namespace implicit_apps {

Json RunGraphBench(const GraphBenchOptions& o) {
  using implicit::Index;
  using implicit::Matrix;
  Table table({"graph", "nodes", "directed edges", "map ms", "ns/edge", "VJP ms", "ns/edge", "parameter VJP ms"},
              {false, true, true, true, true, true, true, true});
  Json rows = Json::array();
  for (const std::string& name : o.graphs) {
    if (!o.quiet) std::cerr << "graph-et: " << name << "\n";
    const implicit::GraphDataset g = LoadShippedGraph(name, "--graph-et-graphs");
    const EtDetector::Options detector;
    implicit::GraphEnergyTransformer<double> et(detector.energy, g.row_offsets, g.neighbors);
    const double D = static_cast<double>(detector.energy.node_dim);
    et.Initialize(detector.seed, detector.init_scale / std::sqrt(D));
    std::mt19937 random(1);
    std::normal_distribution<double> normal(0.0, 1.0);
    Matrix<double> c(et.dimension(), 1), x(et.dimension(), 1), u(et.dimension(), 1), out(et.dimension(), 1);
    for (Index i = 0; i < et.dimension(); ++i) {
      c(i, 0) = normal(random);
      x(i, 0) = c(i, 0) + 0.1 * normal(random);
      u(i, 0) = normal(random);
    }
    et.SetInput(c);
    const implicit::GraphEnergyTransformerMap<double> map(et, detector.step);
    implicit::Vector<double> energy(1), grad(et.num_parameters());
    map.EvaluateWithEnergy(x, out, energy);  // sizes the workspaces
    const double evaluate = MedianSeconds([&] { map.EvaluateWithEnergy(x, out, energy); }, o.repeat);
    const double vjp = MedianSeconds([&] { map.VectorJacobianProduct(x, u, out); }, o.repeat);
    const double parameters = MedianSeconds([&] { map.ParameterVectorJacobianProduct(x, u, grad); }, o.repeat);
    const double edges = static_cast<double>(g.num_edges());
    table.AddRow({name, std::to_string(g.num_nodes()), std::to_string(g.num_edges()), Fmt(1e3 * evaluate, 3),
                  Fmt(1e9 * evaluate / edges, 3), Fmt(1e3 * vjp, 3), Fmt(1e9 * vjp / edges, 3),
                  Fmt(1e3 * parameters, 3)});
    rows.push_back({{"graph", name}, {"nodes", g.num_nodes()}, {"directed_edges", g.num_edges()},
                    {"map_seconds", evaluate}, {"vjp_seconds", vjp}, {"parameter_vjp_seconds", parameters}});
  }
  const implicit::GraphEnergyTransformerOptions e = EtDetector::DefaultEnergy();
  std::cout << "graph Energy Transformer as implicit-graph's et trains it (D " << e.node_dim << ", " << e.num_heads
            << " heads of " << e.head_dim << ", " << e.num_memories << " memories); median of " << o.repeat
            << " calls on the whole graph\n";
  table.Print(std::cout);
  return {{"graph_et", rows}, {"repeat", o.repeat}};
}

}  // namespace implicit_apps
