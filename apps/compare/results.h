// implicit-compare's results: the record of one (problem, solver) run
// (Result) and the files written from them: --json (WriteJson), --csv
// (WriteCsv) and --plot (Plot, residual against iteration and time).
#pragma once

#include "compare/options.h"
#include "problems/problem_run.h"

#include <implicit/solvers/solver.h>

#include <string>
#include <vector>

namespace implicit_apps {

struct Result : RunRecord {
  implicit::Summary summary;
};

// Mean columns of f evaluated per sample (trial points included).
double EvaluationsPerSample(const implicit::Summary& s);

// {"settings": ..., "results": [...]} into --json; prints "json: PATH".
void WriteJson(const Options& o, const std::vector<Result>& results, const std::string& data_source);

// The table as CSV into `path` (--csv); prints "csv: PATH".
void WriteCsv(const std::string& path, const std::vector<Result>& results);

// Residual against iteration (left column) and against time (right), one row per problem.
void Plot(const std::string& path, const std::vector<std::string>& problems, const std::vector<Result>& results);

}  // namespace implicit_apps
