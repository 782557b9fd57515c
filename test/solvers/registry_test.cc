#define BOOST_TEST_MODULE registry
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/anderson.h>
#include <implicit/solvers/broyden.h>
#include <implicit/solvers/gradient_flow.h>
#include <implicit/solvers/lbfgs.h>
#include <implicit/solvers/newton.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the std::invalid_argument that f throws ("" if none).
template <typename F>
std::string InvalidArgumentMessage(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_solver_is_registered_and_built_by_name) {
  const std::vector<std::string> expected = {"picard", "anderson", "broyden",
                                             "newton", "lbfgs",    "gradient_flow"};
  BOOST_TEST(SolverNames() == expected, boost::test_tools::per_element());
  for (const std::string& name : SolverNames()) {
    auto d = MakeSolver<double>(name);
    auto f = MakeSolver<float>(name);
    BOOST_REQUIRE(d != nullptr);
    BOOST_REQUIRE(f != nullptr);
    BOOST_TEST(d->name() == name);
    BOOST_TEST(f->name() == name);
    const auto keys = SolverOptionNames(name);
    for (const char* shared : {"max_iterations", "absolute_tolerance", "relative_tolerance",
                               "max_stall_iterations", "divergence_threshold", "record_trace"}) {
      BOOST_TEST((std::find(keys.begin(), keys.end(), shared) != keys.end()), name << " " << shared);
    }
  }
  BOOST_TEST(SolverNeedsEnergy("lbfgs"));
  BOOST_TEST(SolverNeedsEnergy("gradient_flow"));
  BOOST_TEST(!SolverNeedsEnergy("newton"));
  BOOST_TEST(SolverNeedsJacobianProducts("newton"));
  BOOST_TEST(!SolverNeedsJacobianProducts("anderson"));
}

BOOST_AUTO_TEST_CASE(unknown_solver_lists_valid_names) {
  const std::string m = InvalidArgumentMessage([] { MakeSolver<double>("gauss_seidel"); });
  BOOST_TEST(Contains(m, "gauss_seidel"));
  for (const std::string& name : SolverNames()) BOOST_TEST(Contains(m, name));
  BOOST_TEST(!InvalidArgumentMessage([] { SolverOptionNames("nope"); }).empty());
  BOOST_TEST(!InvalidArgumentMessage([] { SolverNeedsEnergy("nope"); }).empty());
}

BOOST_AUTO_TEST_CASE(unknown_option_lists_valid_keys) {
  const std::string m =
      InvalidArgumentMessage([] { MakeSolver<double>("anderson", {{"memroy", "5"}}); });
  BOOST_TEST(Contains(m, "memroy"));
  for (const std::string& key : SolverOptionNames("anderson")) BOOST_TEST(Contains(m, key));
  // A key of another solver is not silently accepted.
  BOOST_TEST(!InvalidArgumentMessage([] { MakeSolver<double>("picard", {{"memory", "5"}}); })
                  .empty());
}

BOOST_AUTO_TEST_CASE(malformed_and_out_of_range_values) {
  std::string m = InvalidArgumentMessage([] { MakeSolver<double>("anderson", {{"memory", "5x"}}); });
  BOOST_TEST(Contains(m, "memory"));
  BOOST_TEST(Contains(m, "5x"));
  m = InvalidArgumentMessage([] { MakeSolver<float>("picard", {{"damping", "half"}}); });
  BOOST_TEST(Contains(m, "damping"));
  BOOST_TEST(Contains(m, "half"));
  m = InvalidArgumentMessage([] { MakeSolver<double>("newton", {{"newton_krylov", "maybe"}}); });
  BOOST_TEST(Contains(m, "newton_krylov"));
  BOOST_TEST(Contains(m, "maybe"));
  m = InvalidArgumentMessage([] { MakeSolver<double>("picard", {{"max_iterations", "1.5"}}); });
  BOOST_TEST(Contains(m, "max_iterations"));
  m = InvalidArgumentMessage([] { MakeSolver<double>("picard", {{"max_iterations", ""}}); });
  BOOST_TEST(Contains(m, "max_iterations"));
  m = InvalidArgumentMessage(
      [] { MakeSolver<double>("picard", {{"max_iterations", "99999999999"}}); });
  BOOST_TEST(Contains(m, "max_iterations"));
  // Parsed but out of range: the solver's own validation names the field.
  m = InvalidArgumentMessage([] { MakeSolver<double>("picard", {{"damping", "2"}}); });
  BOOST_TEST(Contains(m, "damping"));
  m = InvalidArgumentMessage([] { MakeSolver<double>("newton", {{"trust_region", "cauchy"}}); });
  BOOST_TEST(Contains(m, "trust_region"));
  m = InvalidArgumentMessage(
      [] { MakeSolver<double>("picard", {}, [] { SolverOptions o; o.max_iterations = -1; return o; }()); });
  BOOST_TEST(Contains(m, "max_iterations"));
  // A history longer than kMaxSolverMemory is refused up front (found by
  // fuzzing: memory=1000000000 was accepted and the solve then asked for 48 GB).
  for (const char* solver : {"anderson", "broyden", "lbfgs"}) {
    BOOST_TEST_CONTEXT(solver) {
      m = InvalidArgumentMessage([&] { MakeSolver<double>(solver, {{"memory", "1000000000"}}); });
      BOOST_TEST(Contains(m, "memory must be in 1..1000"));
      BOOST_TEST((MakeSolver<double>(solver, {{"memory", "1000"}}) != nullptr));
    }
  }
}

BOOST_AUTO_TEST_CASE(options_reach_the_solver) {
  SolverOptions base;
  base.absolute_tolerance = 1e-11;
  base.max_iterations = 77;
  {
    auto s = MakeSolver<double>("anderson",
                                ParseOptionList("memory=7, mixing=0.5, ridge=1e-6, record_trace=true"),
                                base);
    const auto& o = dynamic_cast<AndersonSolver<double>&>(*s).options();
    BOOST_TEST(o.memory == 7);
    BOOST_TEST(o.mixing == 0.5);
    BOOST_TEST(o.ridge == 1e-6);
    BOOST_TEST(o.record_trace);
    BOOST_TEST(o.absolute_tolerance == 1e-11);
    BOOST_TEST(o.max_iterations == 77);
  }
  {
    auto s = MakeSolver<float>("broyden", ParseOptionList("residual_factor=2,max_backtracks=3"), base);
    const auto& o = dynamic_cast<BroydenSolver<float>&>(*s).options();
    BOOST_TEST(o.residual_factor == 2.0);
    BOOST_TEST(o.max_backtracks == 3);
  }
  {
    auto s = MakeSolver<double>(
        "newton", ParseOptionList("trust_region=dogleg,newton_krylov=1,forcing_term=1e-4"), base);
    const auto& o = dynamic_cast<NewtonSolver<double>&>(*s).options();
    BOOST_TEST(o.trust_region == "dogleg");
    BOOST_TEST(o.newton_krylov);
    BOOST_TEST(o.forcing_term == 1e-4);
  }
  {
    auto s = MakeSolver<double>("lbfgs", ParseOptionList("memory=4,eigenvalue_scaling=yes"));
    const auto& o = dynamic_cast<LbfgsSolver<double>&>(*s).options();
    BOOST_TEST(o.memory == 4);
    BOOST_TEST(o.eigenvalue_scaling);
  }
  {
    auto s = MakeSolver<double>("gradient_flow",
                                ParseOptionList("step_size=0.25,check_monotone=false,max_stall_iterations=0"));
    const auto& o = dynamic_cast<GradientFlowSolver<double>&>(*s).options();
    BOOST_TEST(o.step_size == 0.25);
    BOOST_TEST(!o.check_monotone);
    BOOST_TEST(o.max_stall_iterations == 0);
  }
  // And they act: an iteration budget given as a string is obeyed.
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(5, 5, 0.9, 1),
                                 testing::RandomMatrix<double>(5, 1, 2));
  Matrix<double> z = Matrix<double>::Zero(5, 2);
  Summary summary = MakeSolver<double>("picard", {{"max_iterations", "3"}})->Solve(map, z);
  BOOST_TEST(summary.iterations == 3);
  BOOST_TEST(summary.termination_type == TerminationType::kMaxIterations);
}

BOOST_AUTO_TEST_CASE(every_listed_key_is_settable) {
  // Setting each key to the default of its own type must parse (no key listed
  // that the registry cannot set).
  for (const std::string& name : SolverNames()) {
    for (const std::string& key : SolverOptionNames(name)) {
      bool accepted = false;
      for (const char* value : {"1", "0.5", "10", "true", "levenberg_marquardt"}) {
        const std::string m = InvalidArgumentMessage([&] { MakeSolver<double>(name, {{key, value}}); });
        // Either accepted, or rejected for its value (range or syntax), never as unknown.
        BOOST_TEST(!Contains(m, "unknown option"), name << " " << key);
        accepted = accepted || m.empty();
      }
      BOOST_TEST(accepted, name << " " << key << " accepts none of the probe values");
    }
  }
}

BOOST_AUTO_TEST_CASE(parse_option_list) {
  auto o = ParseOptionList("memory=5,mixing=0.5");
  BOOST_TEST(o.size() == 2u);
  BOOST_TEST(o["memory"] == "5");
  BOOST_TEST(o["mixing"] == "0.5");
  o = ParseOptionList("  a = 1 ,b=x=y, ");
  BOOST_TEST(o.size() == 2u);
  BOOST_TEST(o["a"] == "1");
  BOOST_TEST(o["b"] == "x=y");
  BOOST_TEST(ParseOptionList("").empty());
  BOOST_TEST(ParseOptionList("  ").empty());
  BOOST_TEST(Contains(InvalidArgumentMessage([] { ParseOptionList("memory"); }), "memory"));
  BOOST_TEST(!InvalidArgumentMessage([] { ParseOptionList("=5"); }).empty());
  BOOST_TEST(Contains(InvalidArgumentMessage([] { ParseOptionList("a=1,a=2"); }), "a"));
}
