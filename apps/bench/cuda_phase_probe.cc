// implicit-bench --device cuda: the cluster kernel's phase probe (cuda_bench_parts.h).
#ifdef IMPLICIT_WITH_CUDA

#include "bench/cuda_bench_parts.h"
#include "common/format.h"
#include "common/table.h"

#include <implicit/solvers/internal/fused_rules.h>

#include <algorithm>

namespace implicit_apps {
namespace device_bench {

// The cluster kernel's phase probe on one solve (cuda_kernels.h,
// kProbeFields): cluster 0's iterations grouped by how many samples were
// active, the mean of each phase per iteration. Printed; returned as JSON (null
// where the cluster kernel does not apply).
template <typename S>
Json ProbeClusterPhases(const std::string& problem, cuda::Context& context, const cuda::HopfieldCccpMap<S>& map,
                        const cuda::DeviceMatrix<S>& queries, const typename implicit::PicardSolver<S>::Options& po,
                        bool tensor_cores) {
  namespace k = cuda::internal;
  const int n = static_cast<int>(map.dimension()), N = static_cast<int>(map.num_patterns());
  const int B = static_cast<int>(queries.cols());
  const std::string label = problem + (tensor_cores ? " (tensor cores)" : " (CUDA cores)");
  k::FusedPicardPlan plan;
  const char* why_not = nullptr;
  if (!k::PlanClusterHopfieldPicard<S>(n, N, B, &plan, &why_not)) {
    std::cout << "phase probe, " << label << ": no cluster loop here (" << (why_not ? why_not : "") << ")\n";
    return Json(nullptr);
  }
  plan.tensor_cores = plan.tensor_cores && tensor_cores;
  const int capacity = 200000;
  const cuda::DeviceBuffer workspace(plan.workspace_bytes), results(4 * sizeof(double) * B),
      probe(sizeof(long long) * k::kProbeFields * capacity);
  long long* stamps = static_cast<long long*>(probe.data());
  cuda::DeviceMatrix<S> z;
  const auto rules = implicit::internal::FusedRules<S>(po);
  for (int run = 0; run < 2; ++run) {  // the first warms up
    z.CopyFrom(context, queries);
    Check(cudaMemsetAsync(stamps, 0xff, probe.bytes(), context.stream()));  // every field -1
    k::ClusterHopfieldPicard<S>(context.stream(), plan, map.patterns().data(), n, N, map.beta(), z.data(), B, rules,
                                workspace.data(), static_cast<double*>(results.data()), stamps, capacity);
    context.Synchronize();
  }
  std::vector<long long> record(static_cast<std::size_t>(k::kProbeFields) * capacity);
  Check(cudaMemcpy(record.data(), stamps, sizeof(long long) * record.size(), cudaMemcpyDeviceToHost));
  int iterations = 0;
  while (iterations < capacity && record[static_cast<std::size_t>(iterations) * k::kProbeFields] >= 0) ++iterations;
  struct Bucket {
    const char* name;
    int lo, hi, iterations = 0;
    double own_a = 0, a = 0, own_b = 0, b = 0, list = 0;  // microseconds, summed
  };
  std::vector<Bucket> buckets = {{"1-8 (sub-chunks)", 1, 8}, {"9-32", 9, 32}, {"33-64", 33, 64}};
  for (int t = 0; t < iterations; ++t) {
    const long long* r = record.data() + static_cast<std::size_t>(t) * k::kProbeFields;
    for (Bucket& bucket : buckets) {
      if (r[0] < bucket.lo || r[0] > bucket.hi) continue;
      ++bucket.iterations;
      bucket.own_a += (r[2] - r[1]) * 1e-3;
      bucket.a += (r[3] - r[1]) * 1e-3;
      bucket.own_b += (r[4] - r[3]) * 1e-3;
      bucket.b += (r[5] - r[3]) * 1e-3;
      if (t + 1 < iterations) bucket.list += (r[k::kProbeFields + 1] - r[5]) * 1e-3;
    }
  }
  const double total_ms =
      iterations > 0 ? (record[static_cast<std::size_t>(iterations - 1) * k::kProbeFields + 5] - record[1]) * 1e-6 : 0;
  std::cout << "phase probe, " << label << ": cluster 0 of " << plan.sample_groups << " (" << plan.pattern_chunks
            << " blocks of " << plan.chunk << " patterns, " << plan.slots << " slots): " << iterations
            << " iterations in " << Fmt(total_ms, 4) << " ms\n";
  Table table({"active samples", "iterations", "phase A, warp 0 (us)", "phase A + barrier (us)",
               "phase B, warp 0 (us)", "phase B + barrier (us)", "active list (us)"},
              {false, true, true, true, true, true, true});
  Json rows = Json::array();
  for (const Bucket& bucket : buckets) {
    const double m = bucket.iterations > 0 ? 1.0 / bucket.iterations : std::nan("");
    auto us = [](double v) { return std::isfinite(v) ? Fmt(v, 3) : std::string("-"); };
    table.AddRow({bucket.name, std::to_string(bucket.iterations), us(bucket.own_a * m), us(bucket.a * m),
                  us(bucket.own_b * m), us(bucket.b * m), us(bucket.list * m)});
    auto json = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
    rows.push_back({{"active", bucket.name},
                    {"iterations", bucket.iterations},
                    {"phase_a_warp0_us", json(bucket.own_a * m)},
                    {"phase_a_us", json(bucket.a * m)},
                    {"phase_b_warp0_us", json(bucket.own_b * m)},
                    {"phase_b_us", json(bucket.b * m)},
                    {"active_list_us", json(bucket.list * m)}});
  }
  table.Print(std::cout);
  return Json{{"problem", problem},           {"tensor_cores", plan.tensor_cores},
              {"clusters", plan.sample_groups}, {"blocks_per_cluster", plan.pattern_chunks},
              {"iterations", iterations},     {"cluster0_ms", total_ms},
              {"by_active_samples", rows}};
}

template Json ProbeClusterPhases<float>(const std::string&, cuda::Context&, const cuda::HopfieldCccpMap<float>&,
                                        const cuda::DeviceMatrix<float>&,
                                        const implicit::PicardSolver<float>::Options&, bool);
template Json ProbeClusterPhases<double>(const std::string&, cuda::Context&, const cuda::HopfieldCccpMap<double>&,
                                         const cuda::DeviceMatrix<double>&,
                                         const implicit::PicardSolver<double>::Options&, bool);

}  // namespace device_bench
}  // namespace implicit_apps

#endif  // IMPLICIT_WITH_CUDA
