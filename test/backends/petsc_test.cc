// The PETSc SNES backend (implicit::petsc, solvers/include/implicit/solvers/petsc.h):
// registration, convergence of every SNES type to the fixed point libimplicit's
// own Picard iteration finds, failures reported as failures (no fixed point,
// NaN in one sample), option validation, and the driver's re-check of what
// PETSc calls converged. In a build without PETSc every case that needs it is
// reported as skipped (with the reason printed), never as passed; the one
// case that runs there checks the stub's behaviour.
#define BOOST_TEST_MODULE petsc
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/petsc.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/h2_solver_problems.h"
#include "support/test_problems.h"

using namespace implicit;

namespace {

// Boost.Test precondition: the case runs only in a build with PETSc.
struct PetscBuilt {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    std::string why;
    const bool ok = petsc::Available(&why);
    if (!ok) std::cout << "SKIPPED: the PETSc backend tests need PETSc: " << why << std::endl;
    boost::test_tools::assertion_result result(ok);
    result.message() << why;
    return result;
  }
};

const std::vector<std::string> kMethods = {"petsc-anderson", "petsc-ngmres", "petsc-qn", "petsc-newtonls",
                                           "petsc-ncg"};

// f(z_b) = tanh(W z_b + c_b): one bias per sample, |W|_2 = w_norm < 1, so a
// contraction with one fixed point per sample. Evaluates single samples
// (column subsets) and has Jacobian-vector products.
template <typename Scalar>
class ColumnTanhMap : public FixedPointMap<Scalar> {
 public:
  ColumnTanhMap(Index n, Index batch, double w_norm, unsigned seed)
      : W_(testing::RandomMatrixWithNorm<Scalar>(n, n, w_norm, seed)),
        C_(testing::RandomMatrix<Scalar>(n, batch, seed + 1, 0.8)) {}
  Index dimension() const override { return W_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    out = ((W_ * z + C_).array().tanh()).matrix();
  }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override {
    ++column_evaluations;
    for (Index j = 0; j < z.cols(); ++j) out.col(j) = ((W_ * z.col(j) + C_.col(columns[j])).array().tanh()).matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v,
                             MatrixRef<Scalar> out) const override {
    Matrix<Scalar> f(z.rows(), z.cols());
    Evaluate(z, f);
    out = ((Scalar(1) - f.array().square()) * (W_ * v).array()).matrix();
  }
  bool SupportsColumnJacobianProducts() const override { return true; }
  void JacobianVectorProductColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                                    ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
    for (Index j = 0; j < z.cols(); ++j) {
      const Vector<Scalar> f = ((W_ * z.col(j) + C_.col(columns[j])).array().tanh()).matrix();
      out.col(j) = ((Scalar(1) - f.array().square()) * (W_ * v.col(j)).array()).matrix();
    }
  }
  mutable int column_evaluations = 0;

 private:
  Matrix<Scalar> W_, C_;
};

// f(z) = z + 1 + tanh(z) / 2 elementwise: |f(z) - z| >= 1/2 everywhere, no fixed point.
class NoFixedPointMap : public FixedPointMap<double> {
 public:
  explicit NoFixedPointMap(Index n) : n_(n) {}
  Index dimension() const override { return n_; }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    out = (z.array() + 1.0 + 0.5 * z.array().tanh()).matrix();
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    out = ((1.0 + 0.5 * (1.0 - z.array().tanh().square())) * v.array()).matrix();
  }

 private:
  Index n_;
};

// Wraps a map; sample `poisoned` is finite at the start z_b = 0 and NaN at
// every other point, so PETSc itself meets the NaN on its first step.
class NaNAwayFromStartMap : public FixedPointMap<double> {
 public:
  NaNAwayFromStartMap(const FixedPointMap<double>& inner, Index poisoned) : inner_(inner), poisoned_(poisoned) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    inner_.Evaluate(z, out);
    if (z.col(poisoned_).lpNorm<Eigen::Infinity>() > 0.0) out.col(poisoned_).setConstant(std::nan(""));
  }
  bool HasJacobianProducts() const override { return inner_.HasJacobianProducts(); }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    inner_.JacobianVectorProduct(z, v, out);
    if (z.col(poisoned_).lpNorm<Eigen::Infinity>() > 0.0) out.col(poisoned_).setConstant(std::nan(""));
  }

 private:
  const FixedPointMap<double>& inner_;
  Index poisoned_;
};

// The reference fixed point: libimplicit's Picard iteration to 1e-13.
template <typename Scalar>
Matrix<Scalar> PicardFixedPoint(const FixedPointMap<Scalar>& map, Index batch) {
  Matrix<Scalar> z = Matrix<Scalar>::Zero(map.dimension(), batch);
  typename PicardSolver<Scalar>::Options options;
  options.absolute_tolerance = 1e-13;
  options.max_iterations = 2000;
  Summary s = PicardSolver<Scalar>(options).Solve(map, z);
  BOOST_REQUIRE(s.IsConverged());
  return z;
}

SolverOptions Base(double tolerance) {
  SolverOptions base;
  base.absolute_tolerance = tolerance;
  base.max_iterations = 200;
  return base;
}

std::string Describe(const Summary& s) {
  std::string text = s.solver + ": " + TerminationTypeToString(s.termination_type) + " [";
  for (std::size_t b = 0; b < s.sample_status.size(); ++b)
    text += std::string(b ? ", " : "") + TerminationTypeToString(s.sample_status[b]) + " it=" +
            std::to_string(s.sample_iterations[b]) + " ev=" + std::to_string(s.sample_evaluations[b]);
  return text + "] jvps=" + std::to_string(s.jacobian_products) + "; " + s.message;
}

}  // namespace

BOOST_AUTO_TEST_CASE(without_petsc_the_stub_says_why) {
  std::string why;
  if (petsc::Available(&why)) {
    BOOST_TEST(why.empty());
    BOOST_TEST(!petsc::Version().empty());
    return;
  }
  BOOST_TEST_MESSAGE("PETSc is not built: " << why);
  BOOST_TEST(!why.empty());
  BOOST_TEST(petsc::Version().empty());
  petsc::RegisterSolvers();
  const std::vector<std::string> names = SolverNames();
  BOOST_TEST((std::find(names.begin(), names.end(), "petsc-qn") == names.end()));
  testing::AffineMap<double> map(testing::RandomMatrixWithNorm<double>(3, 3, 0.5, 1),
                                 testing::RandomMatrix<double>(3, 1, 2));
  Matrix<double> z = Matrix<double>::Zero(3, 2);
  BOOST_CHECK_THROW(petsc::PetscSolver<double>().Solve(map, z), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(registers_five_solvers_once, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  petsc::RegisterSolvers();  // idempotent: no "name taken" error
  const std::vector<std::string> names = SolverNames();
  for (const std::string& name : kMethods) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(std::count(names.begin(), names.end(), name) == 1);
      const std::string library = SolverLibrary(name);
      BOOST_TEST(library.rfind("PETSc ", 0) == 0);
      BOOST_TEST(library == "PETSc " + petsc::Version());
      BOOST_TEST(!SolverNeedsEnergy(name));
      BOOST_TEST(!SolverNeedsJacobianProducts(name));
    }
  }
  const std::vector<std::string> qn_keys = SolverOptionNames("petsc-qn");
  BOOST_TEST((std::find(qn_keys.begin(), qn_keys.end(), "qn_type") != qn_keys.end()));
  BOOST_TEST((std::find(qn_keys.begin(), qn_keys.end(), "memory") != qn_keys.end()));
  const std::vector<std::string> newton_keys = SolverOptionNames("petsc-newtonls");
  BOOST_TEST((std::find(newton_keys.begin(), newton_keys.end(), "jacobian_products") != newton_keys.end()));
  BOOST_TEST((std::find(newton_keys.begin(), newton_keys.end(), "memory") == newton_keys.end()));
  // Version "major.minor.subminor".
  const std::string version = petsc::Version();
  BOOST_TEST(std::count(version.begin(), version.end(), '.') == 2);
}

BOOST_AUTO_TEST_CASE(every_method_reaches_picards_fixed_point, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 12, B = 4;
  const double tol = 1e-10;
  ColumnTanhMap<double> map(n, B, 0.6, 7);
  const Matrix<double> reference = PicardFixedPoint(map, B);

  struct Case {
    std::string name;
    std::map<std::string, std::string> options;
    bool must_converge;
  };
  const std::vector<Case> cases = {
      {"petsc-anderson", {}, true},
      {"petsc-anderson", {{"memory", "2"}, {"damping", "0.7"}}, true},
      {"petsc-ngmres", {{"memory", "5"}}, true},
      {"petsc-qn", {}, true},
      {"petsc-qn", {{"qn_type", "broyden"}, {"memory", "8"}}, true},
      {"petsc-qn", {{"qn_type", "badbroyden"}}, true},
      {"petsc-newtonls", {}, true},
      {"petsc-newtonls", {{"jacobian_products", "false"}}, true},
      {"petsc-newtonls", {{"linesearch", "basic"}, {"krylov_restart", "5"}}, true},
      {"petsc-newtonls", {{"linesearch", "l2"}}, true},
      {"petsc-newtonls", {{"linesearch", "cp"}}, true},
      {"petsc-ncg", {}, false},  // a method for gradient systems; this map is not one
  };
  for (const Case& c : cases) {
    std::string label = c.name;
    for (const auto& kv : c.options) label += " " + kv.first + "=" + kv.second;
    BOOST_TEST_CONTEXT(label) {
      Matrix<double> z = Matrix<double>::Zero(n, B);
      auto solver = MakeSolver<double>(c.name, c.options, Base(tol));
      const Summary s = solver->Solve(map, z);
      BOOST_TEST_MESSAGE(label << " -> " << Describe(s));
      BOOST_TEST(s.num_samples() == B);
      const std::vector<double> r = testing::IndependentResiduals(map, z);
      for (Index b = 0; b < B; ++b) {
        // Whatever the outcome, a kConverged sample meets the tolerance.
        if (s.sample_status[b] == TerminationType::kConverged) {
          BOOST_TEST(r[b] <= tol);
          BOOST_TEST((z.col(b) - reference.col(b)).norm() <= 1e-8);
        }
        BOOST_TEST(std::abs(s.sample_residual[b] - r[b]) <= 1e-14);
      }
      if (c.must_converge) {
        BOOST_TEST(s.IsConverged(), Describe(s));
        for (Index b = 0; b < B; ++b) BOOST_TEST(s.sample_iterations[b] >= 1);
      }
      const bool with_products = c.name == "petsc-newtonls" && c.options.count("jacobian_products") == 0;
      BOOST_TEST((s.jacobian_products > 0) == with_products);
    }
  }
}

BOOST_AUTO_TEST_CASE(whole_batch_maps_and_float, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  // testing::TanhDeqMap has per-sample input and no column evaluation: every
  // evaluation runs the whole batch (the message says so); the result is the same.
  const Index n = 10, B = 3;
  testing::TanhDeqMap<double> map(n, 4, 0.7, 11);
  map.SetInput(testing::RandomMatrix<double>(4, B, 12));
  const Matrix<double> reference = PicardFixedPoint(map, B);
  for (const std::string name : {"petsc-anderson", "petsc-newtonls"}) {
    BOOST_TEST_CONTEXT(name) {
      Matrix<double> z = Matrix<double>::Zero(n, B);
      const Summary s = MakeSolver<double>(name, {}, Base(1e-10))->Solve(map, z);
      BOOST_TEST_MESSAGE(Describe(s));
      BOOST_TEST(s.IsConverged(), Describe(s));
      BOOST_TEST((z - reference).cwiseAbs().maxCoeff() <= 1e-8);
      BOOST_TEST(s.message.find("whole batch") != std::string::npos);
    }
  }

  // float: the map in single precision, PETSc in double; tolerance for float.
  testing::TanhDeqMap<float> map_f(n, 4, 0.7, 11);
  map_f.SetInput(testing::RandomMatrix<float>(4, B, 12));
  const Matrix<float> reference_f = PicardFixedPoint(map_f, B);
  for (const std::string name : {"petsc-anderson", "petsc-qn"}) {
    BOOST_TEST_CONTEXT(name << " float") {
      Matrix<float> z = Matrix<float>::Zero(n, B);
      const Summary s = MakeSolver<float>(name, {}, Base(1e-5))->Solve(map_f, z);
      BOOST_TEST_MESSAGE(Describe(s));
      BOOST_TEST(s.IsConverged(), Describe(s));
      const std::vector<double> r = testing::IndependentResiduals(map_f, z);
      for (double rb : r) BOOST_TEST(rb <= 1e-5);
      BOOST_TEST((z - reference_f).cwiseAbs().maxCoeff() <= 1e-4f);
    }
  }

  // The typed API, without the registry.
  petsc::PetscSolver<double>::Options options;
  options.method = petsc::Method::kQuasiNewton;
  options.absolute_tolerance = 1e-10;
  Matrix<double> z = Matrix<double>::Zero(n, B);
  const Summary s = petsc::PetscSolver<double>(options).Solve(map, z);
  BOOST_TEST(s.solver == "petsc-qn");
  BOOST_TEST(s.IsConverged(), Describe(s));
  BOOST_TEST((z - reference).cwiseAbs().maxCoeff() <= 1e-8);
}

BOOST_AUTO_TEST_CASE(a_map_without_fixed_point_never_converges, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 6, B = 3;
  NoFixedPointMap map(n);
  for (const std::string& name : kMethods) {
    for (const bool products : {true, false}) {
      if (!products && name != "petsc-newtonls") continue;
      BOOST_TEST_CONTEXT(name << (products ? "" : " jacobian_products=false")) {
        Matrix<double> z = testing::RandomMatrix<double>(n, B, 5);
        SolverOptions base = Base(1e-8);
        base.max_iterations = 50;
        std::map<std::string, std::string> options;
        if (!products) options["jacobian_products"] = "false";
        const Summary s = MakeSolver<double>(name, options, base)->Solve(map, z);
        BOOST_TEST_MESSAGE(Describe(s));
        BOOST_TEST(!s.IsConverged());
        for (Index b = 0; b < B; ++b) {
          BOOST_TEST(s.sample_status[b] != TerminationType::kConverged);
          BOOST_TEST(s.sample_residual[b] >= 0.5);  // true everywhere for this map
        }
        BOOST_TEST(z.allFinite());  // an unconverged sample returns its best finite iterate
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(iteration_and_evaluation_budgets, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 12, B = 3;
  ColumnTanhMap<double> map(n, B, 0.9, 21);
  for (const std::string name : {"petsc-anderson", "petsc-newtonls"}) {
    BOOST_TEST_CONTEXT(name << " max_iterations=1") {
      Matrix<double> z = Matrix<double>::Zero(n, B);
      SolverOptions base = Base(1e-14);
      base.max_iterations = 1;
      const Summary s = MakeSolver<double>(name, {}, base)->Solve(map, z);
      BOOST_TEST_MESSAGE(Describe(s));
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST(s.sample_status[b] == TerminationType::kMaxIterations);
        BOOST_TEST(s.sample_iterations[b] <= 1);
      }
    }
    BOOST_TEST_CONTEXT(name << " max_evaluations=3") {
      Matrix<double> z = Matrix<double>::Zero(n, B);
      SolverOptions base = Base(1e-14);
      base.max_evaluations = 3;
      const Summary s = MakeSolver<double>(name, {}, base)->Solve(map, z);
      BOOST_TEST_MESSAGE(Describe(s));
      for (Index b = 0; b < B; ++b) {
        BOOST_TEST(s.sample_status[b] == TerminationType::kMaxIterations);
        // the start, at most 3 for PETSc, the final check
        BOOST_TEST(s.sample_evaluations[b] <= 3 + 2);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_nan_sample_is_isolated, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 8, B = 4, poisoned = 2;
  ColumnTanhMap<double> inner(n, B, 0.5, 31);
  NaNAwayFromStartMap map(inner, poisoned);  // finite at z = 0: the library meets the NaN
  testing::PoisonedMap<double> poisoned_at_start(inner, poisoned);  // NaN already at the start
  for (const std::string& name : kMethods) {
    if (name == "petsc-ncg") continue;  // need not converge on the healthy samples
    for (const FixedPointMap<double>* m : {static_cast<const FixedPointMap<double>*>(&map),
                                           static_cast<const FixedPointMap<double>*>(&poisoned_at_start)}) {
      BOOST_TEST_CONTEXT(name << (m == &map ? " NaN after the start" : " NaN at the start")) {
        Matrix<double> z = Matrix<double>::Zero(n, B);
        const Summary s = MakeSolver<double>(name, {}, Base(1e-10))->Solve(*m, z);
        BOOST_TEST_MESSAGE(Describe(s));
        BOOST_TEST(s.termination_type == TerminationType::kNonFinite);
        for (Index b = 0; b < B; ++b) {
          if (b == poisoned) {
            BOOST_TEST(s.sample_status[b] == TerminationType::kNonFinite);
            BOOST_TEST(z.col(b).allFinite());  // kept at its best (finite) point
          } else {
            BOOST_TEST(s.sample_status[b] == TerminationType::kConverged);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(options_are_validated, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  using Options = std::map<std::string, std::string>;
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-anderson", Options{{"no_such_key", "1"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-anderson", Options{{"memory", "five"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-anderson", Options{{"memory", "0"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-anderson", Options{{"damping", "1.5"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-ngmres", Options{{"damping", "0.5"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-qn", Options{{"qn_type", "sr1"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-ncg", Options{{"ncg_type", "xx"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-newtonls", Options{{"linesearch", "nleqerr"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-newtonls", Options{{"krylov_restart", "0"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-newtonls", Options{{"jacobian_products", "maybe"}}),
                    std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<float>("petsc-qn", Options{{"record_trace", "true"}}), std::invalid_argument);
  SolverOptions tracing;
  tracing.record_trace = true;
  BOOST_CHECK_THROW(MakeSolver<double>("petsc-qn", Options{}, tracing), std::invalid_argument);
  petsc::PetscSolver<double>::Options direct;
  direct.record_trace = true;
  BOOST_CHECK_THROW(petsc::PetscSolver<double>{direct}, std::invalid_argument);
  // Valid values pass.
  BOOST_CHECK_NO_THROW(MakeSolver<double>("petsc-ncg", Options{{"ncg_type", "fr"}}));
  BOOST_CHECK_NO_THROW(MakeSolver<float>("petsc-anderson", Options{{"memory", "3"}, {"damping", "0.5"}}));
}

// PETSc judges |F(u)|_2 in double at the point it holds; libimplicit judges
// |f(z_b) - z_b| at the returned z in the map's precision. With a float map
// and a tolerance near float resolution PETSc can stop at a double point
// whose rounding to float misses the tolerance: such a sample is kFailure,
// counted in the message, never kConverged.
BOOST_AUTO_TEST_CASE(library_convergence_is_rechecked, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 16, B = 8;
  ColumnTanhMap<float> map(n, B, 0.6, 41);
  int refuted_runs = 0;
  for (const double tol : {3e-7, 2e-7, 1e-7}) {
    for (const std::string name : {"petsc-anderson", "petsc-ngmres", "petsc-qn"}) {
      BOOST_TEST_CONTEXT(name << " absolute_tolerance=" << tol) {
        Matrix<float> z = Matrix<float>::Zero(n, B);
        const Summary s = MakeSolver<float>(name, {}, Base(tol))->Solve(map, z);
        BOOST_TEST_MESSAGE(Describe(s));
        const std::vector<double> r = testing::IndependentResiduals(map, z);
        int failures = 0;
        for (Index b = 0; b < B; ++b) {
          if (s.sample_status[b] == TerminationType::kConverged) BOOST_TEST(r[b] <= tol);
          if (s.sample_status[b] == TerminationType::kFailure) {
            ++failures;
            BOOST_TEST(r[b] > tol);
          }
        }
        const std::string marker = " samples the library reported converged fail libimplicit's residual check";
        const std::size_t at = s.message.find(marker);
        if (at != std::string::npos) {
          ++refuted_runs;
          const std::size_t start = s.message.rfind("; ", at);
          const int refuted = std::stoi(s.message.substr(start + 2, at - start - 2));
          BOOST_TEST(refuted >= 1);
          BOOST_TEST(failures >= refuted);
          BOOST_TEST(!s.IsConverged());
        }
      }
    }
  }
  // Measured here: several of the 9 runs have a refuted sample.
  BOOST_TEST(refuted_runs > 0);
}

// A map that throws: the exception reaches the caller unchanged, PETSc is
// left usable (the next solve works).
class ThrowAwayFromStartMap : public FixedPointMap<double> {
 public:
  explicit ThrowAwayFromStartMap(const FixedPointMap<double>& inner) : inner_(inner) {}
  Index dimension() const override { return inner_.dimension(); }
  void Evaluate(ConstMatrixRef<double> z, MatrixRef<double> out) const override {
    if (z.lpNorm<Eigen::Infinity>() > 0.0) throw std::logic_error("map failure");
    inner_.Evaluate(z, out);
  }
  bool HasJacobianProducts() const override { return inner_.HasJacobianProducts(); }
  void JacobianVectorProduct(ConstMatrixRef<double> z, ConstMatrixRef<double> v,
                             MatrixRef<double> out) const override {
    inner_.JacobianVectorProduct(z, v, out);
  }

 private:
  const FixedPointMap<double>& inner_;
};

BOOST_AUTO_TEST_CASE(an_exception_in_the_map_propagates, *boost::unit_test::precondition(PetscBuilt())) {
  petsc::RegisterSolvers();
  const Index n = 6, B = 2;
  ColumnTanhMap<double> inner(n, B, 0.5, 51);
  ThrowAwayFromStartMap map(inner);
  for (const std::string& name : kMethods) {
    BOOST_TEST_CONTEXT(name) {
      Matrix<double> z = Matrix<double>::Zero(n, B);
      BOOST_CHECK_THROW(MakeSolver<double>(name, {}, Base(1e-10))->Solve(map, z), std::logic_error);
      z.setZero();
      const Summary s = MakeSolver<double>("petsc-anderson", {}, Base(1e-10))->Solve(inner, z);
      BOOST_TEST(s.IsConverged(), Describe(s));
    }
  }
}
