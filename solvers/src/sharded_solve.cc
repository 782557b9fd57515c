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

template <typename Scalar>
std::vector<double> Pack(const Summary& s, ConstMatrixRef<Scalar> z) {
  const size_t count = s.sample_status.size();
  std::vector<double> buffer;
  buffer.reserve(kHeader + kSampleFields * count + size_t(z.size()));
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
  for (Index b = 0; b < z.cols(); ++b) {
    for (Index i = 0; i < z.rows(); ++i) buffer.push_back(double(z(i, b)));
  }
  return buffer;
}

}  // namespace

template <typename Scalar>
Summary ShardedSolve(const Solver<Scalar>& solver,
                     const FixedPointMap<typename internal::NonDeduced<Scalar>::type>& local_map,
                     MatrixRef<typename internal::NonDeduced<Scalar>::type> z,
                     const Communicator& comm) {
  const Shard mine = ShardOf(z.cols(), comm);
  Summary local;
  std::string error;
  try {
    if (mine.count > 0) {
      Matrix<Scalar> block = z.middleCols(mine.begin, mine.count);
      local = solver.Solve(local_map, block);
      z.middleCols(mine.begin, mine.count) = block;
    } else {
      local.solver = solver.name();
      local.termination_type = TerminationType::kConverged;
    }
  } catch (const std::exception& e) {
    error = "rank " + std::to_string(comm.rank()) + ": " + e.what();
  }
  error = FirstError(comm, error);
  if (!error.empty()) throw std::invalid_argument("ShardedSolve: " + error);

  std::vector<double> all;
  comm.AllGather(Pack<Scalar>(local, z.middleCols(mine.begin, mine.count)), &all);

  Summary merged;
  merged.solver = local.solver;
  merged.message = "solved on " + std::to_string(comm.size()) + " ranks";
  merged.termination_type = TerminationType::kConverged;
  merged.absolute_residual = 0.0;
  merged.relative_residual = 0.0;
  const Index n = z.rows();
  size_t at = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const Shard shard = ShardOf(z.cols(), r, comm.size());
    const auto termination = static_cast<TerminationType>(static_cast<int>(all[at]));
    if (shard.count > 0 && Severity(termination) > Severity(merged.termination_type)) {
      merged.termination_type = termination;
    }
    merged.iterations = std::max(merged.iterations, static_cast<int>(all[at + 1]));
    merged.function_evaluations += static_cast<int>(all[at + 2]);
    merged.jacobian_products += static_cast<int>(all[at + 3]);
    if (shard.count > 0) {
      merged.absolute_residual = std::max(merged.absolute_residual, all[at + 4]);
      merged.relative_residual = std::max(merged.relative_residual, all[at + 5]);
    }
    merged.wall_time_seconds = std::max(merged.wall_time_seconds, all[at + 6]);
    at += kHeader;
    for (Index b = 0; b < shard.count; ++b, at += kSampleFields) {
      merged.sample_status.push_back(static_cast<TerminationType>(static_cast<int>(all[at])));
      merged.sample_residual.push_back(all[at + 1]);
      merged.sample_iterations.push_back(static_cast<int>(all[at + 2]));
      merged.sample_evaluations.push_back(static_cast<int>(all[at + 3]));
      merged.sample_accelerated_steps.push_back(static_cast<int>(all[at + 4]));
      merged.sample_backtracks.push_back(static_cast<int>(all[at + 5]));
      merged.sample_fallbacks.push_back(static_cast<int>(all[at + 6]));
    }
    for (Index b = 0; b < shard.count; ++b) {
      for (Index i = 0; i < n; ++i) z(i, shard.begin + b) = static_cast<Scalar>(all[at++]);
    }
  }
  return merged;
}

template Summary ShardedSolve<float>(const Solver<float>&, const FixedPointMap<float>&,
                                     MatrixRef<float>, const Communicator&);
template Summary ShardedSolve<double>(const Solver<double>&, const FixedPointMap<double>&,
                                      MatrixRef<double>, const Communicator&);

}  // namespace implicit
