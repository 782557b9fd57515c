// ShardedSolve: solve this rank's columns, then gather every rank's results.
#include <implicit/solvers/sharded_solve.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace {

// Per-sample fields of a Summary, in the order they are packed.
constexpr int kSampleFields = 7;
// Scalars packed ahead of them: termination, iterations, function evaluations,
// Jacobian products, absolute residual, relative residual, wall time.
constexpr int kHeader = 7;

// Larger = more severe, for merging the ranks' terminations.
int Severity(TerminationType t) {
  switch (t) {
    case TerminationType::kConverged: return 0;
    case TerminationType::kUserAbort: return 1;
    case TerminationType::kMaxIterations: return 2;
    case TerminationType::kStalled: return 3;
    case TerminationType::kFailure: return 4;
    case TerminationType::kDiverged: return 5;
    case TerminationType::kNonFinite: return 6;
    case TerminationType::kInvalidInput: return 7;
  }
  return 7;
}

std::vector<double> Pack(const Summary& s) {
  const size_t count = s.sample_status.size();
  std::vector<double> buffer;
  buffer.reserve(kHeader + kSampleFields * count);
  buffer.insert(buffer.end(), {double(static_cast<int>(s.termination_type)), double(s.iterations),
                               double(s.function_evaluations), double(s.jacobian_products),
                               s.absolute_residual, s.relative_residual, s.wall_time_seconds});
  for (size_t b = 0; b < count; ++b) {
    buffer.insert(buffer.end(),
                  {double(static_cast<int>(s.sample_status[b])), s.sample_residual[b],
                   double(s.sample_iterations[b]), double(s.sample_evaluations[b]),
                   double(s.sample_accelerated_steps[b]), double(s.sample_backtracks[b]),
                   double(s.sample_fallbacks[b])});
  }
  return buffer;
}

// The Summary of `count` samples packed at `at` (advanced past it).
Summary Unpack(const std::vector<double>& all, Index count, size_t* at) {
  const double* h = &all[*at];
  Summary s;
  s.termination_type = static_cast<TerminationType>(static_cast<int>(h[0]));
  s.iterations = static_cast<int>(h[1]);
  s.function_evaluations = static_cast<int>(h[2]);
  s.jacobian_products = static_cast<int>(h[3]);
  s.absolute_residual = h[4];
  s.relative_residual = h[5];
  s.wall_time_seconds = h[6];
  *at += kHeader;
  for (Index b = 0; b < count; ++b, *at += kSampleFields) {
    const double* f = &all[*at];
    s.sample_status.push_back(static_cast<TerminationType>(static_cast<int>(f[0])));
    s.sample_residual.push_back(f[1]);
    s.sample_iterations.push_back(static_cast<int>(f[2]));
    s.sample_evaluations.push_back(static_cast<int>(f[3]));
    s.sample_accelerated_steps.push_back(static_cast<int>(f[4]));
    s.sample_backtracks.push_back(static_cast<int>(f[5]));
    s.sample_fallbacks.push_back(static_cast<int>(f[6]));
  }
  return s;
}

}  // namespace

Summary MergeShardSummaries(const std::vector<Summary>& shards, const std::string& message) {
  Summary merged;
  merged.message = message;
  merged.termination_type = TerminationType::kConverged;
  merged.absolute_residual = 0.0;
  merged.relative_residual = 0.0;
  for (const Summary& s : shards) {
    if (merged.solver.empty()) merged.solver = s.solver;
    const bool has_samples = !s.sample_status.empty();
    if (has_samples && Severity(s.termination_type) > Severity(merged.termination_type)) {
      merged.termination_type = s.termination_type;
    }
    merged.iterations = std::max(merged.iterations, s.iterations);
    merged.function_evaluations += s.function_evaluations;
    merged.jacobian_products += s.jacobian_products;
    if (has_samples) {
      merged.absolute_residual = std::max(merged.absolute_residual, s.absolute_residual);
      merged.relative_residual = std::max(merged.relative_residual, s.relative_residual);
    }
    merged.wall_time_seconds = std::max(merged.wall_time_seconds, s.wall_time_seconds);
    auto append = [](auto* to, const auto& from) { to->insert(to->end(), from.begin(), from.end()); };
    append(&merged.sample_status, s.sample_status);
    append(&merged.sample_residual, s.sample_residual);
    append(&merged.sample_iterations, s.sample_iterations);
    append(&merged.sample_evaluations, s.sample_evaluations);
    append(&merged.sample_accelerated_steps, s.sample_accelerated_steps);
    append(&merged.sample_backtracks, s.sample_backtracks);
    append(&merged.sample_fallbacks, s.sample_fallbacks);
  }
  return merged;
}

Summary GatherShardSummaries(const Summary& local, Index batch, const Communicator& comm) {
  std::string error;
  if (local.sample_status.size() != static_cast<size_t>(ShardOf(batch, comm).count)) {
    error = "rank " + std::to_string(comm.rank()) + ": its Summary has " +
            std::to_string(local.sample_status.size()) + " samples, its shard " +
            std::to_string(ShardOf(batch, comm).count);
  }
  error = FirstError(comm, error);  // every rank throws, none waits in the gather
  if (!error.empty()) throw std::invalid_argument("GatherShardSummaries: " + error);
  std::vector<double> all;
  comm.AllGather(Pack(local), &all);
  std::vector<Summary> shards;
  size_t at = 0;
  for (int r = 0; r < comm.size(); ++r) {
    shards.push_back(Unpack(all, ShardOf(batch, r, comm.size()).count, &at));
    shards.back().solver = local.solver;
  }
  return MergeShardSummaries(shards, "solved on " + std::to_string(comm.size()) + " ranks");
}

namespace {

template <typename Scalar>
Summary SolveShards(const Solver<Scalar>& solver, const FixedPointMap<Scalar>& local_map,
                    MatrixRef<Scalar> z, const Communicator& comm) {
  const Shard mine = ShardOf(z.cols(), comm);
  Summary local;
  local.solver = solver.name();
  local.termination_type = TerminationType::kConverged;
  std::string error;
  try {
    if (mine.count > 0) {
      Matrix<Scalar> block = z.middleCols(mine.begin, mine.count);
      local = solver.Solve(local_map, block);
      z.middleCols(mine.begin, mine.count) = block;
    }
  } catch (const std::exception& e) {
    error = "rank " + std::to_string(comm.rank()) + ": " + e.what();
  }
  error = FirstError(comm, error);
  if (!error.empty()) throw std::invalid_argument("ShardedSolve: " + error);

  // The columns: shards are contiguous and in rank order.
  const Matrix<double> block = z.middleCols(mine.begin, mine.count).template cast<double>();
  std::vector<double> columns;
  comm.AllGather(std::vector<double>(block.data(), block.data() + block.size()), &columns);
  z = Eigen::Map<const Matrix<double>>(columns.data(), z.rows(), z.cols()).cast<Scalar>();
  return GatherShardSummaries(local, z.cols(), comm);
}

}  // namespace

Summary ShardedSolve(const Solver<float>& solver, const FixedPointMap<float>& local_map,
                     MatrixRef<float> z, const Communicator& comm) {
  return SolveShards(solver, local_map, z, comm);
}
Summary ShardedSolve(const Solver<double>& solver, const FixedPointMap<double>& local_map,
                     MatrixRef<double> z, const Communicator& comm) {
  return SolveShards(solver, local_map, z, comm);
}

}  // namespace implicit
