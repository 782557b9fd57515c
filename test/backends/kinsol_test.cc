#define BOOST_TEST_MODULE kinsol
#include <boost/test/unit_test.hpp>

#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/picard.h>
#include <implicit/solvers/registry.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/test_problems.h"

using namespace implicit;

namespace {

// Skips the calling test case (with the reason) in a build without KINSOL.
#define SKIP_WITHOUT_KINSOL()                                           \
  do {                                                                  \
    std::string why;                                                    \
    if (!kinsol::Available(&why)) {                                     \
      BOOST_TEST_MESSAGE("skipped: " << why);                           \
      return;                                                           \
    }                                                                   \
    kinsol::RegisterSolvers();                                          \
  } while (0)

// f(z_b) = tanh(W z_b) / 2 + c_b, a contraction (|W| <= 1) with per-sample
// shifts that joins the active set; `poison` (>= 0) makes that sample's value
// NaN away from the origin, `check_offset` shifts the batch evaluation (not
// the per-column one) to model a map whose two paths disagree.
template <typename Scalar>
class ShiftedTanhMap : public FixedPointMap<Scalar> {
 public:
  ShiftedTanhMap(Index n, Index batch, unsigned seed)
      : W_(testing::RandomMatrixWithNorm<Scalar>(n, n, 0.9, seed)), c_(testing::RandomMatrix<Scalar>(n, batch, seed + 1)) {}
  Index dimension() const override { return W_.rows(); }
  void Evaluate(ConstMatrixRef<Scalar> z, MatrixRef<Scalar> out) const override {
    std::vector<Index> all(z.cols());
    for (Index b = 0; b < z.cols(); ++b) all[b] = b;
    EvaluateColumns(z, all, out);
    out.array() += static_cast<Scalar>(check_offset);
  }
  bool SupportsColumnSubsets() const override { return true; }
  void EvaluateColumns(ConstMatrixRef<Scalar> z, const std::vector<Index>& columns,
                       MatrixRef<Scalar> out) const override {
    for (Index j = 0; j < z.cols(); ++j) {
      out.col(j) = ((W_ * z.col(j)).array().tanh() / Scalar(2)).matrix() + c_.col(columns[j]);
      if (columns[j] == poison && z.col(j).norm() > 0) out(0, j) = std::numeric_limits<Scalar>::quiet_NaN();
    }
  }
  bool HasJacobianProducts() const override { return true; }
  void JacobianVectorProduct(ConstMatrixRef<Scalar> z, ConstMatrixRef<Scalar> v, MatrixRef<Scalar> out) const override {
    const Matrix<Scalar> t = (W_ * z).array().tanh().matrix();
    out = ((Scalar(1) - t.array().square()) / Scalar(2) * (W_ * v).array()).matrix();
  }
  void VectorJacobianProduct(ConstMatrixRef<Scalar>, ConstMatrixRef<Scalar>, MatrixRef<Scalar>) const override {
    throw std::logic_error("not used");
  }
  Index poison = -1;
  double check_offset = 0.0;

 private:
  Matrix<Scalar> W_, c_;
};

template <typename Scalar>
double MaxResidual(const FixedPointMap<Scalar>& map, const Matrix<Scalar>& z) {
  Matrix<Scalar> fz(z.rows(), z.cols());
  map.Evaluate(z, fz);
  return static_cast<double>((fz - z).colwise().norm().maxCoeff());
}

SolverOptions Tight() {
  SolverOptions o;
  o.absolute_tolerance = 1e-11;
  o.max_iterations = 200;
  return o;
}

const std::vector<std::string> kMethods = {"kinsol-picard", "kinsol-anderson", "kinsol-newton-gmres"};

}  // namespace

BOOST_AUTO_TEST_CASE(registration_adds_the_three_methods_once) {
  SKIP_WITHOUT_KINSOL();
  kinsol::RegisterSolvers();  // a second call changes nothing
  const std::vector<std::string> names = SolverNames();
  for (const std::string& name : kMethods) {
    BOOST_TEST(std::count(names.begin(), names.end(), name) == 1, name);
    BOOST_TEST(SolverLibrary(name).rfind("SUNDIALS KINSOL " + kinsol::Version(), 0) == 0u);
    BOOST_TEST(!SolverNeedsEnergy(name));
    const auto keys = SolverOptionNames(name);
    BOOST_TEST((std::find(keys.begin(), keys.end(), "absolute_tolerance") != keys.end()));
  }
  BOOST_TEST(SolverLibrary("anderson") == "libimplicit");
  BOOST_CHECK_THROW(RegisterSolver(SolverRegistration{}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(every_method_finds_picards_fixed_point) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<double> map(12, 6, 3);
  Matrix<double> reference = Matrix<double>::Zero(12, 6);
  PicardSolver<double>::Options po;
  static_cast<SolverOptions&>(po) = Tight();
  BOOST_REQUIRE(PicardSolver<double>(po).Solve(map, reference).IsConverged());
  for (const std::string& name : kMethods) {
    for (const char* jvp : {"true", "false"}) {
      if (name != "kinsol-newton-gmres" && std::string(jvp) == "false") continue;
      std::map<std::string, std::string> values;
      if (name == "kinsol-newton-gmres") values["jacobian_products"] = jvp;
      Matrix<double> z = Matrix<double>::Zero(12, 6);
      const Summary s = MakeSolver<double>(name, values, Tight())->Solve(map, z);
      BOOST_TEST_CONTEXT(name << " jacobian_products=" << jvp << ": " << s.BriefReport()) {
        BOOST_TEST(s.IsConverged());
        BOOST_TEST(s.num_converged() == 6);
        BOOST_TEST(MaxResidual(map, z) <= 1e-11);
        BOOST_TEST((z - reference).cwiseAbs().maxCoeff() <= 1e-8);
        BOOST_TEST(s.total_sample_evaluations() > 6);
        for (int e : s.sample_evaluations) BOOST_TEST(e >= 2);  // the start, the library's, the check
      }
    }
  }
  // Newton with the map's JVPs needs far fewer iterations than the fixed point.
  Matrix<double> z1 = Matrix<double>::Zero(12, 6), z2 = z1;
  const Summary newton = MakeSolver<double>("kinsol-newton-gmres", {}, Tight())->Solve(map, z1);
  const Summary picard = MakeSolver<double>("kinsol-picard", {}, Tight())->Solve(map, z2);
  BOOST_TEST(newton.iterations < picard.iterations);
  BOOST_TEST(newton.jacobian_products > 0);
}

// Every QR update offered at every small depth, with and without a delay,
// finds the fixed point (ICWY, which crashed inside SUNDIALS 6 -- the
// fuzzer's input memory=1,orthogonalization=icwy,delay=2, this map at memory
// 2 -- is refused: options_are_validated).
BOOST_AUTO_TEST_CASE(every_orthogonalization_at_every_small_depth) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<double> map(12, 3, 5);
  for (const char* orthogonalization : {"mgs", "cgs2", "dcgs2"}) {
    for (const char* memory : {"1", "2", "3"}) {
      for (const char* delay : {"0", "2"}) {
        BOOST_TEST_CHECKPOINT(orthogonalization << " memory " << memory << " delay " << delay);
        Matrix<double> z = Matrix<double>::Zero(12, 3);
        const Summary s = MakeSolver<double>("kinsol-anderson",
                                             {{"orthogonalization", orthogonalization}, {"memory", memory},
                                              {"delay", delay}},
                                             Tight())
                              ->Solve(map, z);
        BOOST_TEST_CONTEXT(orthogonalization << " memory " << memory << " delay " << delay << ": "
                                             << s.BriefReport()) {
          BOOST_TEST(s.num_converged() == 3);
          BOOST_TEST(MaxResidual(map, z) <= 1e-11);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(float_maps_and_maps_without_column_subsets) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<float> map(8, 4, 5);
  Matrix<float> z = Matrix<float>::Zero(8, 4);
  SolverOptions o = Tight();
  o.absolute_tolerance = 1e-5;
  const Summary s = MakeSolver<float>("kinsol-anderson", {{"memory", "3"}}, o)->Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.BriefReport());
  BOOST_TEST(MaxResidual(map, z) <= 1e-5);

  // An input-injected DEQ map cannot evaluate one sample alone: each
  // evaluation runs the whole batch, and the message says so.
  testing::TanhDeqMap<double> deq(10, 4, 0.8, 11);
  deq.SetInput(testing::RandomMatrix<double>(4, 5, 12));
  Matrix<double> reference = Matrix<double>::Zero(10, 5);
  PicardSolver<double>::Options po;
  static_cast<SolverOptions&>(po) = Tight();
  BOOST_REQUIRE(PicardSolver<double>(po).Solve(deq, reference).IsConverged());
  for (const std::string& name : kMethods) {
    Matrix<double> zz = Matrix<double>::Zero(10, 5);
    const Summary t = MakeSolver<double>(name, {}, Tight())->Solve(deq, zz);
    BOOST_TEST(t.IsConverged(), name << ": " << t.BriefReport());
    BOOST_TEST((zz - reference).cwiseAbs().maxCoeff() <= 1e-8, name);
    BOOST_TEST(t.message.find("whole batch") != std::string::npos, t.message);
  }
}

BOOST_AUTO_TEST_CASE(no_fixed_point_is_never_converged_and_divergence_is_caught) {
  SKIP_WITHOUT_KINSOL();
  // f(z) = z + 1: no fixed point, F(u) = -1 everywhere.
  testing::AffineMap<double> shift(Matrix<double>::Identity(5, 5), Vector<double>::Ones(5));
  for (const std::string& name : kMethods) {
    Matrix<double> z = Matrix<double>::Zero(5, 3);
    const Summary s = MakeSolver<double>(name, {}, Tight())->Solve(shift, z);
    BOOST_TEST(s.num_converged() == 0, name << ": " << s.BriefReport());
    BOOST_TEST(!s.IsConverged());
    BOOST_TEST(z.allFinite());
  }
  // f(z) = 2 z + 1 from 0: the fixed-point iteration's residual doubles each
  // step and passes divergence_threshold.
  testing::AffineMap<double> expanding(2.0 * Matrix<double>::Identity(5, 5), Vector<double>::Ones(5));
  Matrix<double> z = Matrix<double>::Zero(5, 2);
  const Summary s = MakeSolver<double>("kinsol-picard", {}, Tight())->Solve(expanding, z);
  for (TerminationType t : s.sample_status) BOOST_TEST((t == TerminationType::kDiverged), s.BriefReport());
  BOOST_TEST((s.termination_type == TerminationType::kDiverged));
  // ... returned at the best point it evaluated, the start.
  BOOST_TEST(z.cwiseAbs().maxCoeff() == 0.0);
}

BOOST_AUTO_TEST_CASE(a_non_finite_sample_stays_isolated) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<double> map(6, 4, 7);
  map.poison = 2;
  for (const std::string& name : kMethods) {
    Matrix<double> z = Matrix<double>::Zero(6, 4);
    const Summary s = MakeSolver<double>(name, {}, Tight())->Solve(map, z);
    BOOST_TEST_CONTEXT(name << ": " << s.BriefReport()) {
      BOOST_TEST((s.sample_status[2] == TerminationType::kNonFinite));
      BOOST_TEST(s.num_converged() == 3);
      BOOST_TEST((s.termination_type == TerminationType::kNonFinite));
      BOOST_TEST(z.allFinite());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_library_convergence_that_fails_the_check_is_a_failure) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<double> map(6, 3, 9);
  map.check_offset = 1e-3;  // the batch evaluation disagrees with the per-sample one
  Matrix<double> z = Matrix<double>::Zero(6, 3);
  const Summary s = MakeSolver<double>("kinsol-anderson", {}, Tight())->Solve(map, z);
  for (TerminationType t : s.sample_status) BOOST_TEST((t == TerminationType::kFailure), s.BriefReport());
  BOOST_TEST(s.message.find("fail libimplicit's residual check") != std::string::npos, s.message);
}

BOOST_AUTO_TEST_CASE(budgets_and_the_callback) {
  SKIP_WITHOUT_KINSOL();
  ShiftedTanhMap<double> map(6, 4, 13);
  SolverOptions o = Tight();
  o.max_evaluations = 3;
  Matrix<double> z = Matrix<double>::Zero(6, 4);
  Summary s = MakeSolver<double>("kinsol-picard", {}, o)->Solve(map, z);
  for (Index b = 0; b < 4; ++b) {
    BOOST_TEST((s.sample_status[b] == TerminationType::kMaxIterations));
    BOOST_TEST(s.sample_evaluations[b] <= 3 + 2);  // + the start and the check
  }
  o = Tight();
  int calls = 0;
  o.callback = [&calls](const IterationSummary& it) {
    ++calls;
    BOOST_TEST(it.iteration == calls);
    return calls == 2 ? CallbackReturnType::kAbort : CallbackReturnType::kContinue;
  };
  z.setZero();
  s = MakeSolver<double>("kinsol-anderson", {}, o)->Solve(map, z);
  BOOST_TEST(calls == 2);
  BOOST_TEST((s.termination_type == TerminationType::kUserAbort));
  BOOST_TEST(s.num_converged() == 2);
  BOOST_TEST((s.sample_status[3] == TerminationType::kUserAbort));
}

BOOST_AUTO_TEST_CASE(options_are_validated) {
  SKIP_WITHOUT_KINSOL();
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson", {{"memroy", "3"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-picard", {{"memory", "3"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson", {{"memory", "x"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson", {{"memory", "0"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson", {{"orthogonalization", "qr"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson", {{"orthogonalization", "icwy"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-newton-gmres", {{"globalization", "trust"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-picard", {{"record_trace", "true"}}), std::invalid_argument);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-picard", {{"damping", "1.5"}}), std::invalid_argument);
  try {
    MakeSolver<double>("kinsol-anderson", {{"memroy", "3"}});
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("memroy") != std::string::npos);
    BOOST_TEST(m.find("orthogonalization") != std::string::npos);  // lists the valid keys
  }
  try {  // refused with the reason: SUNDIALS 6's ICWY crashes
    MakeSolver<double>("kinsol-anderson", {{"orthogonalization", "icwy"}});
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("icwy is not offered") != std::string::npos);
  }
  // Shapes: a batch that does not match the map.
  ShiftedTanhMap<double> map(6, 2, 1);
  Matrix<double> wrong = Matrix<double>::Zero(5, 2);
  BOOST_CHECK_THROW(MakeSolver<double>("kinsol-anderson")->Solve(map, wrong), std::invalid_argument);
}

// A map that throws away from the start: the exception reaches the caller
// (never through KINSOL's C frames), and KINSOL works afterwards.
BOOST_AUTO_TEST_CASE(an_exception_in_the_map_propagates) {
  SKIP_WITHOUT_KINSOL();
  struct Throwing : ShiftedTanhMap<double> {
    Throwing() : ShiftedTanhMap<double>(4, 2, 17) {}
    void EvaluateColumns(ConstMatrixRef<double> z, const std::vector<Index>& columns,
                         MatrixRef<double> out) const override {
      if (z.norm() > 0) throw std::logic_error("map failure");
      ShiftedTanhMap<double>::EvaluateColumns(z, columns, out);
    }
  } throwing;
  for (const std::string& name : kMethods) {
    Matrix<double> z = Matrix<double>::Zero(4, 2);
    BOOST_CHECK_THROW(MakeSolver<double>(name, {}, Tight())->Solve(throwing, z), std::logic_error);
  }
  ShiftedTanhMap<double> map(4, 2, 17);
  Matrix<double> z = Matrix<double>::Zero(4, 2);
  // (memory below n = 4: KINSOL's Anderson with m >= n extrapolates wildly.)
  const Summary s = MakeSolver<double>("kinsol-anderson", {{"memory", "2"}}, Tight())->Solve(map, z);
  BOOST_TEST(s.IsConverged(), s.BriefReport() << " " << s.message);
}
