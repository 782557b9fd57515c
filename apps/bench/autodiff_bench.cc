// implicit-bench --autodiff (autodiff_bench.h).
#include "bench/autodiff_bench.h"

#include "common/timing.h"

#include "common/format.h"
#include "common/table.h"
#include "problems/problem.h"

#include <implicit/core/ad_functions.h>
#include <implicit/core/autodiff_energy.h>
#include <implicit/core/energy_maps.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/solvers/picard.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

Matrix<double> Gaussian(Index rows, Index cols, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  return RandomGaussian(rows, cols, scale, rng);
}

struct Retrieval {
  Matrix<double> P;  // n x N
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    Vector<T> s(P.cols());
    // P is the functor's own: the tape may point to its columns (ad::Persistent).
    for (Index i = 0; i < P.cols(); ++i) s(i) = T(beta) * implicit::ad::Dot(implicit::ad::Persistent(P.col(i)), x);
    return T(0.5) * implicit::ad::Dot(x, x) - implicit::ad::LogSumExp(s) / T(beta);
  }
};

// The same energy as a user first writes it: Eigen expressions (the
// patterns need no cast; reverse_eigen.h records the product as one block)...
struct RetrievalEigen {
  Matrix<double> P;
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    using std::log;
    const Vector<T> s = beta * (P.transpose() * x);
    const T m = s.maxCoeff();
    return 0.5 * x.squaredNorm() - (m + log((s.array() - m).exp().sum())) / beta;
  }
};
// ... or scalar loops.
struct RetrievalLoop {
  Matrix<double> P;
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    using std::exp;
    using std::log;
    Vector<T> s(P.cols());
    for (Index i = 0; i < P.cols(); ++i) {
      T dot = T(0.0);
      for (Index k = 0; k < P.rows(); ++k) dot += P(k, i) * x(k);
      s(i) = beta * dot;
    }
    T m = s(0);
    for (Index i = 1; i < s.size(); ++i) m = s(i) > m ? s(i) : m;
    T sum = T(0.0), squares = T(0.0);
    for (Index i = 0; i < s.size(); ++i) sum += exp(s(i) - m);
    for (Index k = 0; k < x.size(); ++k) squares += x(k) * x(k);
    return 0.5 * squares - (m + log(sum)) / beta;
  }
};

// Attention over tokens of width `width` (x = the width x tokens matrix X):
// K = W_K X, Q = W_Q X, E = 0.5|x|^2 - sum_t lse_s(beta K_s . Q_t) / beta -
// 0.5 sum relu(Xi^T X)^2, every product one ad::Product.
struct Attention {
  Index tokens, width;
  Matrix<double> beta_WK, WQ, Xi;  // beta W_K and W_Q (key width x width), Xi (width x memories)
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    namespace ad = implicit::ad;
    const Eigen::Map<const Matrix<T>> X(x.data(), width, tokens);
    // beta on the keys' data projection, so the scores come out scaled.
    const Matrix<T> K = ad::Product(beta_WK, X), Q = ad::Product(WQ, X);
    const Matrix<T> S = ad::Product(K.transpose(), Q);  // S(s, t) = beta K_s . Q_t
    const Matrix<T> H = ad::Product(Xi.transpose(), X);
    Vector<T> relu(H.size());
    for (Index i = 0; i < H.size(); ++i) relu(i) = ad::Max(H(i), T(0.0));
    T e = T(0.5) * ad::Dot(x, x) - T(0.5) * ad::Dot(relu, relu);
    for (Index t = 0; t < tokens; ++t) e -= ad::LogSumExp(S.col(t)) / T(beta);
    return e;
  }
};

// The attention energy in Eigen expressions.
struct AttentionEigen {
  Index tokens, width;
  Matrix<double> beta_WK, WQ, Xi;
  double beta;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>&) const {
    using std::log;
    const Eigen::Map<const Matrix<T>> X(x.data(), width, tokens);
    const Matrix<T> K = beta_WK * X, Q = WQ * X;
    const Matrix<T> S = K.transpose() * Q;
    const Matrix<T> H = Xi.transpose() * X;
    T e = 0.5 * x.squaredNorm() - 0.5 * H.cwiseMax(T(0.0)).squaredNorm();
    for (Index t = 0; t < tokens; ++t) {
      const T m = S.col(t).maxCoeff();
      e -= (m + log((S.col(t).array() - m).exp().sum())) / beta;
    }
    return e;
  }
};

// The Energy Transformer's energy (energy_transformer_energy.h: LayerNorm
// with gamma = 1, delta = 0; attention over the other tokens; ReLU memory)
// written as a user energy with trainable theta = (W_K, W_Q, Xi) in the
// closed form's parameter order, as docs/energies.md advises: every matrix
// product one ad::Product (all heads' keys and queries at once, beta folded
// into the keys' input), sums and squared norms as ad::Dot, one node each.
struct UserEnergyTransformer {
  Index N, D, H, Y, M;
  double beta, eps;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    namespace ad = implicit::ad;
    using std::sqrt;
    const Eigen::Map<const Matrix<T>> WK(theta.data(), H * Y, D);
    const Eigen::Map<const Matrix<T>> WQ(theta.data() + H * Y * D, H * Y, D);
    const Eigen::Map<const Matrix<T>> Xi(theta.data() + 2 * H * Y * D, D, M);
    const Vector<double> ones = Vector<double>::Ones(D);
    Matrix<T> G(D, N);
    T e = T(0.0);
    for (Index a = 0; a < N; ++a) {  // E_LN = sum_A g_A . x_A - D s_A
      const auto xa = x.segment(a * D, D);
      const T mean = ad::Dot(ones, xa) / T(static_cast<double>(D));
      const Vector<T> centred = xa.array() - mean;
      const T s = sqrt(ad::Dot(centred, centred) / T(static_cast<double>(D)) + T(eps));
      G.col(a) = centred / s;
      e += ad::Dot(G.col(a), xa) - T(static_cast<double>(D)) * s;
    }
    // Every head's keys (times beta) and queries, (H Y) x N each.
    const Matrix<T> K = ad::Product(WK, Matrix<T>(T(beta) * G)), Q = ad::Product(WQ, G);
    Vector<T> scores(N - 1);
    for (Index h = 0; h < H; ++h) {
      // S(b, c) = beta K_b . Q_c in head h.
      const Matrix<T> S = ad::Product(K.middleRows(h * Y, Y).transpose(), Q.middleRows(h * Y, Y));
      for (Index c = 0; c < N; ++c) {
        for (Index b = 0, k = 0; b < N; ++b) {
          if (b != c) scores(k++) = S(b, c);
        }
        e -= ad::LogSumExp(scores) / T(beta);
      }
    }
    const Matrix<T> overlaps = ad::Product(Xi.transpose(), G);  // E_mem = -1/2 sum relu(Xi^T G)^2
    const Vector<T> relu = overlaps.reshaped().unaryExpr([](const T& o) { return ad::Max(o, T(0.0)); });
    e -= T(0.5) * ad::Dot(relu, relu);
    return e;
  }
};

// The Energy Transformer's energy in Eigen expressions, as a user writes it
// from the paper: the same terms as UserEnergyTransformer, no ad:: block.
struct EigenEnergyTransformer {
  Index N, D, H, Y, M;
  double beta, eps;
  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& theta) const {
    using std::log;
    using std::sqrt;
    const Eigen::Map<const Matrix<T>> WK(theta.data(), H * Y, D);
    const Eigen::Map<const Matrix<T>> WQ(theta.data() + H * Y * D, H * Y, D);
    const Eigen::Map<const Matrix<T>> Xi(theta.data() + 2 * H * Y * D, D, M);
    const double d = static_cast<double>(D);
    Matrix<T> G(D, N);
    T e = T(0.0);
    for (Index a = 0; a < N; ++a) {  // LayerNorm's energy: g_A . x_A - D s_A
      const auto xa = x.segment(a * D, D);
      const Vector<T> centred = xa.array() - xa.mean();
      const T s = sqrt(centred.squaredNorm() / d + eps);
      G.col(a) = centred / s;
      e += G.col(a).dot(xa) - d * s;
    }
    const Matrix<T> K = WK * (beta * G), Q = WQ * G;  // every head's keys and queries
    for (Index h = 0; h < H; ++h) {
      const Matrix<T> S = K.middleRows(h * Y, Y).transpose() * Q.middleRows(h * Y, Y);
      for (Index c = 0; c < N; ++c) {  // attention of token c over the others
        Vector<T> s = S.col(c);
        s(c) = T(-std::numeric_limits<double>::infinity());
        const T m = s.maxCoeff();
        e -= (m + log((s.array() - m).exp().sum())) / beta;
      }
    }
    e -= 0.5 * (Xi.transpose() * G).cwiseMax(T(0.0)).squaredNorm();  // ReLU memories
    return e;
  }
};

// Seconds per sample of call(x) over the samples' columns: the median of
// `repeat` calls.
double SecondsPerSample(const std::function<void()>& call, long repeat, Index samples) {
  return MedianSeconds(call, repeat) / static_cast<double>(samples);
}

struct Row {
  std::string energy, style;
  Index n = 0;
  double value = 0;  // seconds per sample
  // Multiples of `value`; < 0: not measured.
  double gradient_forward = -1, gradient_reverse = -1, hvp_forward = -1, hvp_reverse = -1;
  double gradient_closed = -1, hvp_closed = -1;
  double vjp_reverse = -1, vjp_closed = -1;  // parameter VJP (energies with parameters)
  bool forward_one_sample = false;  // forward mode timed on one sample, once
};

// Times value, gradient and HVP of `energy` in both modes on B samples, and
// those of `closed` (the same energy in closed form) when given.
template <typename Functor>
Row Measure(const std::string& name, const std::string& style, implicit::AutoDiffEnergy<Functor, double> energy,
            const implicit::Energy<double>* closed, const AutodiffBenchOptions& o, unsigned seed) {
  const Index n = energy.dimension(), B = o.samples;
  const Matrix<double> x = Gaussian(n, B, 1.0 / std::sqrt(static_cast<double>(n)), seed);
  const Matrix<double> v = Gaussian(n, B, 1.0, seed + 1);
  Matrix<double> out(n, B);
  Vector<double> e(B);
  Row row;
  row.energy = name;
  row.style = style;
  row.n = n;
  row.value = SecondsPerSample([&] { energy.Value(x, e); }, o.repeat * 3, B);
  if (closed != nullptr) {  // the closed form is the same energy
    Vector<double> closed_values(B);
    closed->Value(x, closed_values);
    const double error = (closed_values - e).norm();
    if (!(error <= 1e-9 * (1.0 + e.norm()))) {
      throw std::logic_error("implicit-bench --autodiff: the " + name +
                             " functor and its closed form differ by " + std::to_string(error));
    }
  }
  if (closed != nullptr) {
    row.gradient_closed = SecondsPerSample([&] { closed->Gradient(x, out); }, o.repeat * 3, B) / row.value;
    row.hvp_closed =
        SecondsPerSample([&] { closed->HessianVectorProduct(x, v, out); }, o.repeat * 3, B) / row.value;
  }
  energy.set_mode(implicit::AutoDiffMode::kReverse);
  energy.Gradient(x.col(0), out.col(0));  // grows this thread's tape (not timed)
  row.gradient_reverse = SecondsPerSample([&] { energy.Gradient(x, out); }, o.repeat, B) / row.value;
  row.hvp_reverse =
      SecondsPerSample([&] { energy.HessianVectorProduct(x, v, out); }, o.repeat, B) / row.value;
  if (energy.num_parameters() > 0) {
    Vector<double> dtheta(energy.num_parameters());
    row.vjp_reverse = SecondsPerSample([&] { energy.ParameterVectorJacobianProduct(x, v, dtheta); },
                                       o.repeat, B) / row.value;
    if (closed != nullptr) {
      row.vjp_closed =
          SecondsPerSample([&] { closed->ParameterVectorJacobianProduct(x, v, dtheta); },
                           o.repeat * 3, B) / row.value;
    }
  }
  energy.set_mode(implicit::AutoDiffMode::kForward);
  // A forward gradient is about n/8 evaluations in 8-wide duals.
  const double estimate = row.value * static_cast<double>(n) * static_cast<double>(B);
  row.forward_one_sample = estimate > o.forward_budget;
  const Index fb = row.forward_one_sample ? 1 : B;
  const long fr = row.forward_one_sample ? 1 : o.repeat;
  const Matrix<double> xf = x.leftCols(fb), vf = v.leftCols(fb);
  Matrix<double> outf(n, fb);
  row.gradient_forward = SecondsPerSample([&] { energy.Gradient(xf, outf); }, fr, fb) / row.value;
  row.hvp_forward =
      SecondsPerSample([&] { energy.HessianVectorProduct(xf, vf, outf); }, fr, fb) / row.value;
  return row;
}

// One training step of fixed work through an equilibrium of `energy`: 30
// Picard iterations on the gradient-step map z - 0.1 grad E from z0
// (residuals only, as implicit-et's forward), then 100 GMRES iterations of the
// IFT backward of L = 0.5 |z* - target|^2 (tolerances too small to stop
// earlier: x-space gradient steps on the ET energy do not reach its
// equilibrium in such budgets, and equal work makes the two times comparable).
struct TrainingStep {
  double seconds = 0;  // per sample, the median of `repeat` steps
  int forward_iterations = 0, backward_iterations = 0;
};
TrainingStep MeasureTrainingStep(const implicit::Energy<double>& energy, const Matrix<double>& z0,
                                 const Matrix<double>& target, long repeat) {
  const implicit::GradientStepMap<double> map(energy, 0.1);
  implicit::PicardSolver<double>::Options options;
  options.max_iterations = 30;
  options.absolute_tolerance = 1e-14;
  options.use_energy = false;
  const implicit::PicardSolver<double> solver(options);
  implicit::BackwardOptions backward;
  backward.linear_solver = "gmres";
  backward.tolerance = 1e-14;
  backward.max_iterations = 100;
  // The forward solve is not converged by design: differentiate at its last
  // iterate (a rejected sample's adjoint would cost nothing, not equal work).
  backward.require_converged_forward = false;
  implicit::ImplicitLayer<double> layer(map, solver, backward);
  TrainingStep step;
  Matrix<double> z = z0;
  step.seconds = SecondsPerSample(
      [&] {
        z = z0;
        const implicit::Summary forward = layer.Forward(z);
        const implicit::BackwardResult<double> back = layer.Backward(z - target);
        step.forward_iterations = forward.iterations;
        step.backward_iterations = back.summary.iterations;
      },
      repeat, z0.cols());
  return step;
}

std::string Ratio(double r) { return r < 0 ? "-" : FmtFixed(r, r < 10 ? 1 : 0); }

}  // namespace

Json RunAutodiffBench(const AutodiffBenchOptions& o) {
  std::vector<Row> rows;
  // The et rows' training steps, by style.
  std::optional<TrainingStep> blocks_step, eigen_step, closed_step;
  const auto wanted = [&](const char* energy) {
    return std::find(o.energies.begin(), o.energies.end(), energy) != o.energies.end();
  };
  const auto style = [&](const char* name) {
    return std::find(o.styles.begin(), o.styles.end(), name) != o.styles.end();
  };
  for (long n : o.dimensions) {
    if (!wanted("retrieval") && !wanted("attention")) break;
    if (!o.quiet) std::cerr << "autodiff: n = " << n << "\n";
    const Matrix<double> P = Gaussian(n, o.patterns, 1.0, 7);
    implicit::ModernHopfieldEnergy<double>::Options closed_options;
    closed_options.beta = 2.0;
    const implicit::ModernHopfieldEnergy<double> closed(P, closed_options);
    if (wanted("retrieval")) {
      if (style("blocks")) {
        rows.push_back(Measure("retrieval", "blocks",
                               implicit::AutoDiffEnergy<Retrieval, double>(Retrieval{P, 2.0}, n), &closed, o, 11));
      }
      if (style("eigen")) {
        rows.push_back(Measure("retrieval", "eigen",
                               implicit::AutoDiffEnergy<RetrievalEigen, double>(RetrievalEigen{P, 2.0}, n),
                               &closed, o, 11));
      }
      if (style("loop")) {
        rows.push_back(Measure("retrieval", "loop",
                               implicit::AutoDiffEnergy<RetrievalLoop, double>(RetrievalLoop{P, 2.0}, n),
                               &closed, o, 11));
      }
    }
    const Index width = 16, tokens = std::max<long>(1, n / width);
    const double beta = 1.0;
    const Matrix<double> beta_WK = beta * Gaussian(16, width, 0.25, 21), WQ = Gaussian(16, width, 0.25, 22),
                         Xi = Gaussian(width, 32, 0.25, 23);
    if (wanted("attention") && style("blocks")) {
      rows.push_back(Measure("attention", "blocks",
                             implicit::AutoDiffEnergy<Attention, double>(
                                 Attention{tokens, width, beta_WK, WQ, Xi, beta}, tokens * width),
                             nullptr, o, 31));
    }
    if (wanted("attention") && style("eigen")) {
      rows.push_back(Measure("attention", "eigen",
                             implicit::AutoDiffEnergy<AttentionEigen, double>(
                                 AttentionEigen{tokens, width, beta_WK, WQ, Xi, beta}, tokens * width),
                             nullptr, o, 31));
    }
  }
  if (wanted("et")) {  // the Energy Transformer at implicit-et's sizes, against its closed form
    if (!o.quiet) std::cerr << "autodiff: et\n";
    implicit::EnergyTransformer<double>::Options eo;
    eo.num_tokens = 17;
    eo.token_dim = 32;
    eo.num_heads = 8;
    eo.head_dim = 8;
    eo.num_memories = 32;
    implicit::EnergyTransformer<double> closed(eo);
    const Index n = eo.num_tokens * eo.token_dim;
    // A whole training step of each, on the same batch (the same iterates).
    const Matrix<double> z0 = Gaussian(n, o.samples, 1.0 / std::sqrt(static_cast<double>(n)), 51);
    const Matrix<double> target = Gaussian(n, o.samples, 1.0 / std::sqrt(static_cast<double>(n)), 52);
    const auto measure = [&](const char* name, auto functor, std::optional<TrainingStep>* step) {
      using Functor = decltype(functor);
      implicit::AutoDiffEnergy<Functor, double> user(functor, n, *closed.parameters());
      rows.push_back(Measure("et", name, user, &closed, o, 41));
      user.set_mode(implicit::AutoDiffMode::kReverse);
      *step = MeasureTrainingStep(user, z0, target, o.repeat);
    };
    if (style("blocks")) {
      measure("blocks",
              UserEnergyTransformer{eo.num_tokens, eo.token_dim, eo.num_heads, eo.head_dim, eo.num_memories,
                                    closed.beta(), eo.eps},
              &blocks_step);
    }
    if (style("eigen")) {
      measure("eigen",
              EigenEnergyTransformer{eo.num_tokens, eo.token_dim, eo.num_heads, eo.head_dim, eo.num_memories,
                                     closed.beta(), eo.eps},
              &eigen_step);
    }
    closed_step = MeasureTrainingStep(closed, z0, target, o.repeat);
  }

  std::cout << "User energies (AutoDiffEnergy): time per sample as a multiple of the value's\n"
            << "(style: how the functor is written -- blocks: ad::Dot, ad::LogSumExp, ad::Product; eigen: Eigen "
            << "expressions; loop: scalar loops; closed form: the library's layer; * forward mode timed on one "
            << "sample, once)\n";
  Table table({"energy", "style", "n", "value us", "grad fwd", "grad rev", "grad closed", "hvp fwd", "hvp rev",
               "hvp closed", "vjp rev", "vjp closed"},
              {false, false, true, true, true, true, true, true, true, true, true, true});
  for (const Row& r : rows) {
    const std::string star = r.forward_one_sample ? "*" : "";
    table.AddRow({r.energy, r.style, std::to_string(r.n), FmtFixed(r.value * 1e6, 1),
                  Ratio(r.gradient_forward) + star, Ratio(r.gradient_reverse), Ratio(r.gradient_closed),
                  Ratio(r.hvp_forward) + star, Ratio(r.hvp_reverse), Ratio(r.hvp_closed),
                  Ratio(r.vjp_reverse), Ratio(r.vjp_closed)});
  }
  table.Print(std::cout);
  const auto print_step = [&](const char* style, const std::optional<TrainingStep>& step) {
    if (!step || !closed_step) return;
    std::cout << "et training step of fixed work (30 Picard iterations on z - 0.1 grad E, 100 GMRES iterations "
              << "of the IFT backward), per sample: user energy (" << style << ") "
              << FmtFixed(step->seconds * 1e3, 2) << " ms (" << step->forward_iterations << " + "
              << step->backward_iterations << " iterations), closed form " << FmtFixed(closed_step->seconds * 1e3, 2)
              << " ms (" << closed_step->forward_iterations << " + " << closed_step->backward_iterations
              << "): " << Ratio(step->seconds / closed_step->seconds) << "x\n";
  };
  print_step("blocks", blocks_step);
  print_step("eigen", eigen_step);
  Json root;
  root["settings"] = {{"patterns", o.patterns}, {"styles", o.styles}, {"samples", o.samples}, {"repeat", o.repeat},
                      {"forward_budget", o.forward_budget}, {"reverse_mode", implicit::kHaveReverseMode}};
  root["results"] = Json::array();
  auto ratio = [](double r) { return r < 0 ? Json(nullptr) : Json(r); };
  for (const Row& r : rows) {
    root["results"].push_back({{"energy", r.energy}, {"style", r.style}, {"n", r.n}, {"value_seconds", r.value},
                               {"gradient_forward", ratio(r.gradient_forward)},
                               {"gradient_reverse", ratio(r.gradient_reverse)},
                               {"gradient_closed_form", ratio(r.gradient_closed)},
                               {"hvp_forward", ratio(r.hvp_forward)},
                               {"hvp_reverse", ratio(r.hvp_reverse)},
                               {"hvp_closed_form", ratio(r.hvp_closed)},
                               {"parameter_vjp_reverse", ratio(r.vjp_reverse)},
                               {"parameter_vjp_closed_form", ratio(r.vjp_closed)},
                               {"forward_one_sample", r.forward_one_sample}});
  }
  if (closed_step && (blocks_step || eigen_step)) {
    const auto step = [](const TrainingStep& t) {
      return Json{{"seconds", t.seconds}, {"forward_iterations", t.forward_iterations},
                  {"backward_iterations", t.backward_iterations}};
    };
    Json training = {{"closed_form", step(*closed_step)}};
    if (blocks_step) {  // the user energy written with the blocks
      training["user_energy"] = step(*blocks_step);
      training["ratio"] = blocks_step->seconds / closed_step->seconds;
    }
    if (eigen_step) {  // and in Eigen expressions
      training["eigen_energy"] = step(*eigen_step);
      training["eigen_ratio"] = eigen_step->seconds / closed_step->seconds;
    }
    root["et_training_step"] = training;
  }
  return root;
}

}  // namespace implicit_apps
