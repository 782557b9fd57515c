// implicit-bench --device cuda (cuda_bench.h).
#include "bench/cuda_bench.h"

#include "common/format.h"
#include "common/table.h"
#include "common/timing.h"

#include <stdexcept>

#ifndef IMPLICIT_WITH_CUDA

namespace implicit_apps {
bool DeviceBenchAvailable() { return false; }
Json RunDeviceBench(const DeviceBenchOptions&, const implicit::DigitsDataset&) {
  throw std::runtime_error("--device cuda: this build has no CUDA backend (configure with IMPLICIT_WITH_CUDA=ON)");
}
}  // namespace implicit_apps

#else

#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_hopfield.h>
#include <implicit/core/cuda_kernels.h>
#include <implicit/diff/cuda_backward.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/cuda_energy_transformer.h>
#include <implicit/layers/energy_transformer_map.h>
#include <implicit/layers/hopfield.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/internal/fused_rules.h>
#include <implicit/solvers/registry.h>

#include <cuda_runtime.h>

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace implicit_apps {
namespace {

using implicit::Index;
using implicit::Matrix;
namespace cuda = implicit::cuda;

void Check(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(status));
}

// The floor: S = X^T Z (N x B) and out = X P (n x B), timed with CUDA events;
// the median over `repeat` runs of `inner` back-to-back pairs, per pair.
template <typename S>
double GemmFloorSeconds(cuda::Context& context, const cuda::DeviceMatrix<S>& X, const cuda::DeviceMatrix<S>& Z,
                        int repeat) {
  const int n = static_cast<int>(X.rows()), N = static_cast<int>(X.cols()), B = static_cast<int>(Z.cols());
  cuda::DeviceMatrix<S> scores(N, B), out(n, B);
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start));
  Check(cudaEventCreate(&stop));
  using cuda::internal::CheckBlas;
  using cuda::internal::Gemm;
  auto pair = [&] {
    CheckBlas(Gemm(context.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, N, B, n, S(1), X.data(), n, Z.data(), n, S(0),
                   scores.data(), N),
              "floor: X^T Z");
    CheckBlas(Gemm(context.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, B, N, S(1), X.data(), n, scores.data(), N, S(0),
                   out.data(), n),
              "floor: X P");
  };
  pair();  // warm-up (cuBLAS picks its kernels)
  context.Synchronize();
  const int inner = 10;
  std::vector<double> samples;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    Check(cudaEventRecord(start, context.stream()));
    for (int i = 0; i < inner; ++i) pair();
    Check(cudaEventRecord(stop, context.stream()));
    Check(cudaEventSynchronize(stop));
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e-3 / inner);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(samples);
}

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

struct Row {
  std::string problem, precision, where, solver;
  int converged = 0, samples = 0, iterations = 0;
  long long sample_evaluations = 0;
  double seconds = 0, floor = 0;
  double full_batch_iteration = 0;  // mean seconds of the iterations that began with all B active
};

// The iteration callback's marks: (seconds since the solve began, samples
// still active) after every iteration.
struct IterationMarks {
  std::vector<std::pair<double, int>> marks;
  implicit::IterationCallback Callback() {
    return [this](const implicit::IterationSummary& it) {
      marks.emplace_back(it.seconds, it.num_active);
      return implicit::CallbackReturnType::kContinue;
    };
  }
  // Mean duration of the iterations that began with all `batch` samples active.
  double FullBatchIteration(int batch) const {
    double total = 0;
    int count = 0;
    for (std::size_t k = 1; k < marks.size(); ++k) {
      if (marks[k - 1].second != batch) continue;
      total += marks[k].first - marks[k - 1].first;
      ++count;
    }
    return count > 0 ? total / count : std::nan("");
  }
};


void Fill(Row* row, const implicit::Summary& s) {
  row->converged = s.num_converged();
  row->samples = s.num_samples();
  row->iterations = s.iterations;
  row->sample_evaluations = s.total_sample_evaluations();
}

std::string CpuWhere() { return "cpu (" + std::to_string(Eigen::nbThreads()) + " threads)"; }

// A solver's row: `solve` run once (warm-up: the context's workspace is
// allocated then) and timed `repeat` times; the iteration marks and summary of
// the last run.
template <typename Solve>
Row TimedRow(const std::string& problem, const std::string& precision, const std::string& where,
             const std::string& solver, int repeat, bool warm_up, double floor, int batch, IterationMarks* marks,
             const implicit::Summary& summary, bool quiet, Solve&& solve) {
  if (warm_up) solve();
  Row row{problem, precision, where, solver};
  row.seconds = MedianSeconds(
      [&] {
        marks->marks.clear();
        solve();
      },
      repeat);
  row.floor = floor;
  row.full_batch_iteration = marks->FullBatchIteration(batch);
  Fill(&row, summary);
  if (!quiet) std::cerr << "  " << where << " " << problem << " " << solver << ": " << summary.BriefReport() << "\n";
  return row;
}

// One problem on the device (and, when asked, on the CPU): rows appended.
template <typename S>
void RunProblem(const std::string& problem, const Matrix<double>& patterns, const Matrix<double>& queries,
                double beta, double tol, const DeviceBenchOptions& o, cuda::Context& context, std::vector<Row>* rows,
                Json* probes) {
  const std::string precision = std::is_same<S, float>::value ? "float" : "double";
  const Matrix<S> X = patterns.cast<S>(), Q = queries.cast<S>();
  cuda::HopfieldCccpMap<S> map(context, X, static_cast<S>(beta));
  const cuda::DeviceMatrix<S> queries_device(context, Q);
  const double floor = GemmFloorSeconds(context, map.patterns(), queries_device, static_cast<int>(o.repeat));
  IterationMarks marks;
  implicit::SolverOptions base;
  base.absolute_tolerance = tol;
  base.max_iterations = static_cast<int>(o.max_iter);
  base.callback = marks.Callback();
  const int B = static_cast<int>(queries.cols());
  for (const std::string& name : o.solvers) {
    auto solver = cuda::MakeDeviceSolver<S>(name, {}, base);
    cuda::DeviceMatrix<S> z;
    implicit::Summary summary;
    rows->push_back(TimedRow(problem, precision, "gpu", name, static_cast<int>(o.repeat), true, floor, B, &marks,
                             summary, o.quiet, [&] {
                               z.CopyFrom(context, queries_device);
                               summary = solver->Solve(context, map, z);
                             }));
  }
  // The rows above pass a callback (for the full-batch iteration time), which
  // keeps Picard's loop judged on the host; these let it fuse the whole solve
  // into one kernel where it can (cuda_solvers.h, DeviceLoop): the default
  // (the thread-block cluster kernel, in double with phase A on the tensor
  // cores), the grid kernel, then the cluster kernel on the CUDA cores only.
  if (std::find(o.solvers.begin(), o.solvers.end(), "picard") != o.solvers.end()) {
    typename implicit::PicardSolver<S>::Options po;
    static_cast<implicit::SolverOptions&>(po) = base;
    po.callback = nullptr;
    struct FusedRow {
      cuda::DeviceLoop loop;
      const char *label, *note, *missing;
    };
    for (const FusedRow& f : {FusedRow{cuda::DeviceLoop::kFusedWhenPossible, "picard, fused loop (default)",
                                       cuda::kFusedLoopNote, "picard (no fused loop here)"},
                              FusedRow{cuda::DeviceLoop::kGridWhenPossible, "picard, grid loop", cuda::kFusedLoopNote,
                                       "picard (no grid loop here)"},
                              FusedRow{cuda::DeviceLoop::kClustersOnCudaCores, "picard, cluster loop, CUDA cores",
                                       cuda::kClusterLoopNote, "picard (no cluster loop here)"}}) {
      const cuda::DevicePicardSolver<S> solver(po, f.loop);
      cuda::DeviceMatrix<S> z;
      implicit::Summary summary;
      IterationMarks none;
      Row row = TimedRow(problem, precision, "gpu", f.label, static_cast<int>(o.repeat), true, floor, B, &none,
                         summary, o.quiet, [&] {
                           z.CopyFrom(context, queries_device);
                           summary = solver.Solve(context, map, z);
                         });
      if (summary.message.find(f.note) == std::string::npos) row.solver = f.missing;
      rows->push_back(row);
    }
    for (const bool tensor_cores : {true, false}) {
      if (tensor_cores && !std::is_same<S, double>::value) continue;  // (float: CUDA cores only)
      try {  // (a failing probe must not cost the rows above)
        probes->push_back(ProbeClusterPhases<S>(problem, context, map, queries_device, po, tensor_cores));
      } catch (const std::exception& e) {
        std::cout << "phase probe, " << problem << ": failed: " << e.what() << "\n";
        probes->push_back({{"problem", problem}, {"tensor_cores", tensor_cores}, {"error", e.what()}});
      }
    }
  }
  if (!o.cpu_reference) return;
  implicit::ModernHopfieldEnergy<double>::Options eo;
  eo.beta = beta;
  eo.learn_beta = false;
  implicit::ModernHopfieldEnergy<double> energy(patterns, eo);
  implicit::CccpMap<double> cpu_map(energy);
  for (const std::string& name : o.solvers) {
    auto solver = implicit::MakeSolver<double>(name, {}, base);
    implicit::Summary summary;
    Matrix<double> z;
    rows->push_back(TimedRow(problem, "double", CpuWhere(), name, std::min<int>(3, static_cast<int>(o.repeat)), false,
                             std::nan(""), B, &marks, summary, o.quiet, [&] {
                               z = queries;
                               summary = solver->Solve(cpu_map, z);
                             }));
  }
}

// The Energy Transformer's clamped dynamics (image completion shape of
// implicit-et: 17 tokens of 32, 8 heads of 8, 32 ReLU memories, half of the
// 16 patch tokens free), B samples, double, on the device and on the CPU.
void RunEt(const DeviceBenchOptions& o, cuda::Context& context, std::vector<Row>* rows) {
  implicit::EnergyTransformerOptions eo;
  eo.num_tokens = 17;
  eo.token_dim = 32;
  eo.num_heads = 8;
  eo.head_dim = 8;
  eo.num_memories = 32;
  implicit::EnergyTransformer<double> et(eo);
  const Index n = et.dimension(), B = o.et_samples;
  std::mt19937 gen(2);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix<double> values(n, B), mask = Matrix<double>::Zero(n, B);
  for (Index j = 0; j < B; ++j) {
    for (Index i = 0; i < n; ++i) values(i, j) = normal(gen);
    std::vector<int> patches(16);
    for (int t = 0; t < 16; ++t) patches[t] = t + 1;  // token 0 is the class token
    std::shuffle(patches.begin(), patches.end(), gen);
    for (int t = 0; t < 8; ++t) mask.block(patches[t] * eo.token_dim, j, eo.token_dim, 1).setOnes();
  }
  const double step = 0.5;
  cuda::EnergyTransformerMap<double> map(context, et, step);
  map.SetClamp(context, mask, values);
  const cuda::DeviceMatrix<double> start(context, values);
  IterationMarks marks;
  implicit::SolverOptions base;
  base.absolute_tolerance = o.et_tol;
  base.max_iterations = static_cast<int>(o.max_iter);
  base.callback = marks.Callback();
  const std::string problem = "et-completion (B " + std::to_string(B) + ")";
  for (const std::string& name : o.solvers) {
    auto solver = cuda::MakeDeviceSolver<double>(name, {}, base);
    cuda::DeviceMatrix<double> z;
    implicit::Summary summary;
    rows->push_back(TimedRow(problem, "double", "gpu", name, static_cast<int>(o.repeat), true, std::nan(""),
                             static_cast<int>(B), &marks, summary, o.quiet, [&] {
                               z.CopyFrom(context, start);
                               summary = solver->Solve(context, map, z);
                             }));
  }
  // A training step's equilibrium part: the forward solve and the IFT backward
  // pass (adjoint tolerance 1e-8) for L = 0.5 |z*|^2, with the first solver.
  implicit::BackwardOptions backward;
  backward.tolerance = 1e-8;
  backward.max_iterations = 200;
  const std::string step_name = o.solvers.front() + " + IFT backward";
  {
    auto solver = cuda::MakeDeviceSolver<double>(o.solvers.front(), {}, base);
    cuda::DeviceMatrix<double> z, grad;
    implicit::Summary summary;
    implicit::Summary adjoint;
    auto train_step = [&] {
      z.CopyFrom(context, start);
      summary = solver->Solve(context, map, z);
      grad.CopyFrom(context, z);
      adjoint = cuda::ImplicitBackward(context, map, z, grad, backward).summary;
    };
    train_step();
    Row row{problem, "double", "gpu", step_name};
    row.seconds = MedianSeconds(train_step, o.repeat);
    row.floor = std::nan("");
    row.full_batch_iteration = std::nan("");
    Fill(&row, summary);
    rows->push_back(row);
    if (!o.quiet) std::cerr << "  gpu " << problem << " backward: " << adjoint.BriefReport() << "\n";
  }
  if (!o.cpu_reference) return;
  implicit::EnergyTransformerMap<double> cpu_map(et, step);
  cpu_map.SetClamp(mask, values);
  {
    auto solver = implicit::MakeSolver<double>(o.solvers.front(), {}, base);
    implicit::Summary summary;
    Matrix<double> z;
    implicit::LinearSolveSummary adjoint;
    Row row{problem, "double", CpuWhere(), step_name};
    row.seconds = MedianSeconds(
        [&] {
          z = values;
          summary = solver->Solve(cpu_map, z);
          adjoint = implicit::ImplicitBackward(cpu_map, z, z, backward).summary;
        },
        1);
    row.floor = std::nan("");
    row.full_batch_iteration = std::nan("");
    Fill(&row, summary);
    rows->push_back(row);
    if (!o.quiet) std::cerr << "  cpu " << problem << " backward: " << adjoint.solver << " "
                            << implicit::TerminationTypeToString(adjoint.termination_type) << ", "
                            << adjoint.iterations << " iterations\n";
  }
  {
    auto solver = implicit::MakeSolver<double>(o.solvers.front(), {}, base);
    implicit::Summary summary;
    Matrix<double> z;
    rows->push_back(TimedRow(problem, "double", CpuWhere(), o.solvers.front(), 1, false, std::nan(""),
                             static_cast<int>(B), &marks, summary, o.quiet, [&] {
                               z = values;
                               summary = solver->Solve(cpu_map, z);
                             }));
  }
}

}  // namespace

bool DeviceBenchAvailable() { return true; }

Json RunDeviceBench(const DeviceBenchOptions& o, const implicit::DigitsDataset& digits) {
  cuda::Context context(0, o.tf32);
  std::cout << "device: " << context.device_name() << (o.tf32 ? " (float GEMMs on TF32)" : "") << "\n";
  std::vector<Row> rows;
  Json probes = Json::array();
  for (const std::string& problem : o.problems) {
    if (problem == "hopfield-digits") {
      const Matrix<double> patterns = digits.Scaled();
      Matrix<double> queries = patterns;
      queries.bottomRows(32).setZero();
      RunProblem<double>(problem, patterns, queries, 2.0, o.tol, o, context, &rows, &probes);
    } else if (problem == "retrieval") {
      const Index n = o.retrieval_dimension, N = o.retrieval_patterns, B = o.retrieval_queries;
      if (B > N) throw std::invalid_argument("--retrieval-queries must be <= --retrieval-patterns");
      std::mt19937 gen(1);
      std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(n)));
      Matrix<double> patterns(n, N), queries(n, B);
      for (Index j = 0; j < N; ++j)
        for (Index i = 0; i < n; ++i) patterns(i, j) = normal(gen);
      for (Index j = 0; j < B; ++j)
        for (Index i = 0; i < n; ++i) queries(i, j) = patterns(i, j) + 0.3 * normal(gen);
      DeviceBenchOptions gpu_only = o;
      gpu_only.cpu_reference = false;  // minutes per solve on a CPU
      RunProblem<float>(problem, patterns, queries, o.retrieval_beta, o.float_tol, gpu_only, context, &rows, &probes);
    } else if (problem == "et") {
      RunEt(o, context, &rows);
    } else {
      throw std::invalid_argument("--device-problems: unknown problem '" + problem +
                                  "' (hopfield-digits, retrieval, et)");
    }
  }

  Table table({"problem", "precision", "where", "solver", "converged", "iters", "sample evals", "solve ms",
               "ms / iter", "full-batch ms / iter", "floor ms", "x floor full-batch iter", "x floor / sample-iter"},
              {false, false, false, false, true, true, true, true, true, true, true, true, true});
  Json results = Json::array();
  for (const Row& r : rows) {
    const double per_iteration = r.iterations > 0 ? r.seconds / r.iterations : std::nan("");
    const double per_sample = r.sample_evaluations > 0 ? r.seconds / double(r.sample_evaluations) : std::nan("");
    const double x_iteration = r.full_batch_iteration / r.floor;
    const double x_sample = per_sample / (r.floor / r.samples);
    auto ms = [](double s) { return std::isfinite(s) ? Fmt(s * 1e3, 4) : std::string("-"); };
    auto x = [](double v) { return std::isfinite(v) ? Fmt(v, 3) : std::string("-"); };
    table.AddRow({r.problem, r.precision, r.where, r.solver,
                  std::to_string(r.converged) + "/" + std::to_string(r.samples), std::to_string(r.iterations),
                  std::to_string(r.sample_evaluations), ms(r.seconds), ms(per_iteration),
                  ms(r.full_batch_iteration), ms(r.floor), x(x_iteration), x(x_sample)});
    results.push_back({{"problem", r.problem},
                       {"precision", r.precision},
                       {"where", r.where},
                       {"solver", r.solver},
                       {"converged", r.converged},
                       {"samples", r.samples},
                       {"iterations", r.iterations},
                       {"sample_evaluations", r.sample_evaluations},
                       {"solve_seconds", r.seconds},
                       {"full_batch_iteration_seconds",
                        std::isfinite(r.full_batch_iteration) ? Json(r.full_batch_iteration) : Json(nullptr)},
                       {"floor_seconds", std::isfinite(r.floor) ? Json(r.floor) : Json(nullptr)},
                       {"x_floor_full_batch_iteration", std::isfinite(x_iteration) ? Json(x_iteration) : Json(nullptr)},
                       {"x_floor_per_sample_iteration", std::isfinite(x_sample) ? Json(x_sample) : Json(nullptr)}});
  }
  table.Print(std::cout);
  Json root;
  root["device"] = context.device_name();
  root["tf32"] = o.tf32;
  root["results"] = results;
  root["cluster_phase_probes"] = probes;
  return root;
}

}  // namespace implicit_apps

#endif  // IMPLICIT_WITH_CUDA
