#include <implicit/solvers/solver.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace implicit {

const char* TerminationTypeToString(TerminationType type) {
  switch (type) {
    case TerminationType::kConverged: return "converged";
    case TerminationType::kMaxIterations: return "max_iterations";
    case TerminationType::kDiverged: return "diverged";
    case TerminationType::kNonFinite: return "non_finite";
    case TerminationType::kStalled: return "stalled";
    case TerminationType::kUserAbort: return "user_abort";
    case TerminationType::kInvalidInput: return "invalid_input";
    case TerminationType::kFailure: return "failure";
  }
  return "unknown";
}

bool SolverOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  if (max_iterations < 0) return fail("max_iterations must be >= 0, got " + std::to_string(max_iterations));
  if (max_evaluations < 0)
    return fail("max_evaluations must be >= 0 (0 = no budget), got " + std::to_string(max_evaluations));
  if (!(absolute_tolerance >= 0) || !std::isfinite(absolute_tolerance))
    return fail("absolute_tolerance must be finite and >= 0, got " + std::to_string(absolute_tolerance));
  if (!(relative_tolerance >= 0) || !std::isfinite(relative_tolerance))
    return fail("relative_tolerance must be finite and >= 0, got " + std::to_string(relative_tolerance));
  if (max_stall_iterations < 0)
    return fail("max_stall_iterations must be >= 0, got " + std::to_string(max_stall_iterations));
  if (!(divergence_threshold > 1))
    return fail("divergence_threshold must be > 1, got " + std::to_string(divergence_threshold));
  return true;
}

int Summary::num_converged() const {
  return static_cast<int>(
      std::count(sample_status.begin(), sample_status.end(), TerminationType::kConverged));
}

namespace {
long long SumOf(const std::vector<int>& per_sample) {
  long long total = 0;
  for (int v : per_sample) total += v;
  return total;
}
}  // namespace

long long Summary::total_sample_evaluations() const { return SumOf(sample_evaluations); }

std::string Summary::BriefReport() const {
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %s, %d/%d samples converged, %d iterations, %d evaluations "
                "(%lld sample evaluations), residual %.3e, %.3f s",
                solver.c_str(), TerminationTypeToString(termination_type), num_converged(),
                num_samples(), iterations, function_evaluations, total_sample_evaluations(),
                absolute_residual, wall_time_seconds);
  return line;
}

std::string Summary::FullReport() const {
  std::ostringstream s;
  s << "Solver summary (" << solver << ")\n"
    << "  termination            " << TerminationTypeToString(termination_type) << "\n"
    << "  message                " << message << "\n"
    << "  iterations             " << iterations << "\n"
    << "  function evaluations   " << function_evaluations << "\n"
    << "  jacobian products      " << jacobian_products << "\n"
    << "  sample evaluations     " << total_sample_evaluations() << "\n"
    << "  absolute residual      " << absolute_residual << "\n"
    << "  relative residual      " << relative_residual << "\n"
    << "  wall time (s)          " << wall_time_seconds << "\n"
    << "  samples                " << num_samples() << "\n";
  for (TerminationType t :
       {TerminationType::kConverged, TerminationType::kMaxIterations, TerminationType::kDiverged,
        TerminationType::kNonFinite, TerminationType::kStalled, TerminationType::kUserAbort,
        TerminationType::kFailure}) {
    const auto count = std::count(sample_status.begin(), sample_status.end(), t);
    if (count > 0) s << "    " << TerminationTypeToString(t) << ": " << count << "\n";
  }
  const long long accelerated = SumOf(sample_accelerated_steps),
                  backtracks = SumOf(sample_backtracks), fallbacks = SumOf(sample_fallbacks);
  if (accelerated + backtracks + fallbacks > 0) {
    s << "  energy guard           " << accelerated << " accelerated steps, " << backtracks
      << " backtracks, " << fallbacks << " fallbacks\n";
  }
  if (!trace.empty()) s << "  trace entries          " << trace.size() << "\n";
  return s.str();
}

namespace internal {
void ThrowIfInvalid(const std::string& solver, bool valid, const std::string& error) {
  if (!valid) throw std::invalid_argument(solver + ": invalid options: " + error);
}
}  // namespace internal

}  // namespace implicit
