// What implicit-compare and implicit-bench record of one solver run on one
// problem, up to the solve itself.
#pragma once

#include "common/json_output.h"
#include "common/solvers.h"
#include "problems/problem.h"

#include <implicit/solvers/solver.h>

#include <exception>
#include <string>

namespace implicit_apps {

struct RunRecord {
  std::string problem, solver, status, message;
  bool skipped = false, failed = false;
  Index dimension = 0, samples = 0;
  bool ran() const { return !skipped && !failed; }
  // After a solve that threw `e` (e.g. a map the solver rejects).
  void Fail(const std::exception& e) {
    failed = true;
    status = implicit::TerminationTypeToString(implicit::TerminationType::kInvalidInput);
    message = e.what();
  }
};

// `solver` on `problem` before the solve: "skipped" with the reason when the
// solver does not apply to the problem's map (ran() is then false).
template <typename S>
void StartRun(const ProblemT<S>& problem, const std::string& solver, RunRecord* r) {
  r->problem = problem.name();
  r->solver = solver;
  r->dimension = problem.map().dimension();
  r->samples = problem.initial().cols();
  r->message = SkipReason(solver, problem.map());
  r->skipped = !r->message.empty();
  if (r->skipped) r->status = "skipped";
}

// The fields every result object of the JSON starts with.
inline Json RunJson(const RunRecord& r) {
  return {{"problem", r.problem}, {"solver", r.solver},       {"status", r.status},
          {"skipped", r.skipped}, {"dimension", r.dimension}, {"samples", r.samples}};
}

}  // namespace implicit_apps
