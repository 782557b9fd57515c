// The device bench's parts shared between its files (internal to
// implicit-bench; CUDA builds only): a result row, the iteration marks, timed
// rows; the phase probe (cuda_phase_probe.cc) and the Energy Transformer
// problem (cuda_bench_et.cc).
//
//   Row row = TimedRow(problem, "double", "gpu", "picard", repeat, true, floor, B, &marks, summary,
//                      quiet, [&] { summary = solver.Solve(context, map, z); });
#pragma once

#include "bench/cuda_bench.h"
#include "common/json_output.h"
#include "common/timing.h"

#include <implicit/core/cuda_hopfield.h>
#include <implicit/solvers/picard.h>

#include <cuda_runtime.h>

#include <Eigen/Core>

#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {
namespace device_bench {

namespace cuda = implicit::cuda;

inline void Check(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(status));
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


inline void Fill(Row* row, const implicit::Summary& s) {
  row->converged = s.num_converged();
  row->samples = s.num_samples();
  row->iterations = s.iterations;
  row->sample_evaluations = s.total_sample_evaluations();
}

inline std::string CpuWhere() { return "cpu (" + std::to_string(Eigen::nbThreads()) + " threads)"; }

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

// The cluster kernel's phase probe (cuda_phase_probe.cc): see its definition.
template <typename S>
Json ProbeClusterPhases(const std::string& problem, cuda::Context& context, const cuda::HopfieldCccpMap<S>& map,
                        const cuda::DeviceMatrix<S>& queries, const typename implicit::PicardSolver<S>::Options& po,
                        bool tensor_cores);

// The Energy Transformer problem (cuda_bench_et.cc): rows appended.
void RunEt(const DeviceBenchOptions& o, cuda::Context& context, std::vector<Row>* rows);

}  // namespace device_bench
}  // namespace implicit_apps
