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

#include "bench/cuda_bench_parts.h"

#include <implicit/core/cuda_blas.h>
#include <implicit/core/cuda_hopfield.h>
#include <implicit/layers/hopfield.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/registry.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

using implicit::Index;
using implicit::Matrix;
namespace cuda = implicit::cuda;
using device_bench::Check;
using device_bench::CpuWhere;
using device_bench::Fill;
using device_bench::IterationMarks;
using device_bench::ProbeClusterPhases;
using device_bench::Row;
using device_bench::TimedRow;

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
      device_bench::RunEt(o, context, &rows);
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
