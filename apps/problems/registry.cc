#include "problems/registry.h"

#include "common/app_main.h"
#include "common/format.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace implicit_apps {
namespace {

std::vector<ProblemInfo>& Problems() {
  static std::vector<ProblemInfo> problems;
  return problems;
}

}  // namespace

bool RegisterProblemInfo(ProblemInfo info) {
  std::vector<ProblemInfo>& problems = Problems();
  for (const ProblemInfo& p : problems)
    if (p.name == info.name) throw std::logic_error("problem '" + info.name + "' registered twice");
  problems.push_back(std::move(info));
  std::stable_sort(problems.begin(), problems.end(),
                   [](const ProblemInfo& a, const ProblemInfo& b) { return a.order < b.order; });
  return true;
}

const std::vector<ProblemInfo>& RegisteredProblems() { return Problems(); }

std::vector<std::string> ProblemNames() {
  std::vector<std::string> names;
  for (const ProblemInfo& p : Problems()) names.push_back(p.name);
  return names;
}

const ProblemInfo& FindProblem(const std::string& name) {
  for (const ProblemInfo& p : Problems())
    if (p.name == name) return p;
  throw UsageError("unknown problem '" + Excerpt(name) + "' (available: " + JoinNames(ProblemNames()) + ")");
}

std::vector<ProblemParameter> ProblemParameters() {
  std::vector<ProblemParameter> out;
  std::set<std::string> seen;
  for (const ProblemInfo& p : Problems())
    for (const ProblemParameter& q : p.parameters)
      if (seen.insert(q.name).second) out.push_back(q);
  return out;
}

double ProblemSettings::Parameter(const std::string& name) const {
  const auto it = parameters.find(name);
  if (it != parameters.end()) return it->second;
  for (const ProblemParameter& q : ProblemParameters())
    if (q.name == name) return q.default_value;
  throw std::logic_error("no problem parameter '" + name + "' is registered");
}

}  // namespace implicit_apps
