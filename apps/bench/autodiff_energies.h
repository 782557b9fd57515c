// The user energies implicit-bench --autodiff measures (autodiff_bench.h): the
// retrieval, attention and Energy Transformer energies written as
// AutoDiffEnergy functors, each in the ways a user writes one -- with the ad::
// blocks (ad::Dot, ad::LogSumExp, ad::Product), in Eigen expressions and (the
// retrieval energy) in scalar loops.
#pragma once

#include "problems/problem.h"

#include <implicit/core/ad_functions.h>
#include <implicit/core/types.h>

#include <cmath>
#include <limits>

namespace implicit_apps {
namespace autodiff {

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;

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

}  // namespace autodiff
}  // namespace implicit_apps
