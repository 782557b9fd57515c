// Graph Energy Transformer (graph_energy_transformer.h): the closed-form
// gradient, Hessian-vector, parameter and input products agree with automatic
// derivatives of the energy written literally (a templated function over the
// CSR lists) and with finite differences, in double and float; dE/dg is the
// dynamics direction and E never increases along it; relabelling the nodes
// permutes values, derivatives and equilibria; isolated nodes and self-loops;
// Picard, Anderson and gradient flow reach the fixed points of the map, and
// the IFT gradient matches finite differences of the loss at re-solved
// equilibria; the node energies sum to E, their products are exact, and a
// loss read from them at the equilibrium has exact gradients; malformed
// adjacency is rejected.
#define BOOST_TEST_MODULE graph_energy_transformer
#include <boost/test/unit_test.hpp>

#include <implicit/core/autodiff_energy.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/graph_energy_transformer.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/gradient_flow.h>
#include <implicit/solvers/picard.h>

#include "support/dual_products.h"
#include "support/energy_checks.h"
#include "support/fused_energy_checks.h"
#include "support/test_problems.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using implicit::Index;
using implicit::Matrix;
using implicit::Vector;
using implicit::testing::MatMul;
using implicit::testing::MatVec;
using implicit::testing::RandomMatrix;
using Get = implicit::GraphEnergyTransformer<double>;
using GetMap = implicit::GraphEnergyTransformerMap<double>;
using Memory = implicit::EnergyTransformerMemory;
using Options = implicit::GraphEnergyTransformerOptions;

namespace {

struct Graph {
  std::vector<Index> offsets, neighbors;
  Index nodes() const { return static_cast<Index>(offsets.size()) - 1; }
};

// CSR of adjacency lists (each sorted here).
Graph FromLists(std::vector<std::vector<Index>> lists) {
  Graph g{{0}, {}};
  for (auto& l : lists) {
    std::sort(l.begin(), l.end());
    g.neighbors.insert(g.neighbors.end(), l.begin(), l.end());
    g.offsets.push_back(static_cast<Index>(g.neighbors.size()));
  }
  return g;
}

// A random directed graph on N nodes: edges with probability 0.45 (every row
// i in 1..N-2 non-empty), a self-loop on node 1 (and random ones), node 0
// with no neighbours (it attends to nothing) and node N-1 isolated (no edge in
// or out).
Graph RandomGraph(Index N, unsigned seed) {
  std::mt19937 gen(seed);
  std::bernoulli_distribution edge(0.45);
  std::vector<std::vector<Index>> lists(N);
  for (Index i = 1; i < N - 1; ++i)
    for (Index j = 0; j < N - 1; ++j)
      if (edge(gen) || j == (i + 1) % (N - 1) || (i == 1 && j == 1)) lists[i].push_back(j);
  return FromLists(lists);
}

// The graph relabelled by perm (node i becomes perm[i]).
Graph Relabel(const Graph& g, const std::vector<Index>& perm) {
  std::vector<std::vector<Index>> lists(g.nodes());
  for (Index i = 0; i < g.nodes(); ++i)
    for (Index e = g.offsets[i]; e < g.offsets[i + 1]; ++e)
      lists[perm[i]].push_back(perm[g.neighbors[e]]);
  return FromLists(lists);
}

// Node i's D rows of x moved to node perm[i].
template <typename S>
Matrix<S> Permute(const Matrix<S>& x, const std::vector<Index>& perm, Index D) {
  Matrix<S> y(x.rows(), x.cols());
  for (Index i = 0; i < static_cast<Index>(perm.size()); ++i)
    y.middleRows(perm[i] * D, D) = x.middleRows(i * D, D);
  return y;
}

// The graph ET energy of one sample literally as defined, over the CSR lists,
// with the external field c (zero when the closed form has no input).
struct GraphEtFunctor {
  Graph graph;
  Index D, H, Y, M;
  bool relu;
  double beta, memory_beta, eps, gamma0, delta0;
  bool learn_ln;

  template <typename T>
  T operator()(const Vector<T>& x, const Vector<T>& c, const Vector<T>& theta) const {
    using std::exp;
    using std::log;
    using std::sqrt;
    const Index N = graph.nodes();
    Index off = 0;
    Matrix<T> WK, WQ, Xi;
    if (H > 0) {
      WK = Eigen::Map<const Matrix<T>>(theta.data(), H * Y, D);
      WQ = Eigen::Map<const Matrix<T>>(theta.data() + H * Y * D, H * Y, D);
      off += 2 * H * Y * D;
    }
    if (M > 0) {
      Xi = Eigen::Map<const Matrix<T>>(theta.data() + off, D, M);
      off += D * M;
    }
    const T gamma = learn_ln ? theta(off) : T(gamma0);
    const T delta = learn_ln ? theta(off + 1) : T(delta0);
    Matrix<T> G(D, N);
    T E(0);
    for (Index i = 0; i < N; ++i) {
      const Vector<T> xi = x.segment(i * D, D);
      T mean(0), var(0);
      for (Index k = 0; k < D; ++k) mean += xi(k);
      mean /= T(D);
      for (Index k = 0; k < D; ++k) var += (xi(k) - mean) * (xi(k) - mean);
      const T s = sqrt(var / T(D) + T(eps));
      T sum(0), gx(0);
      for (Index k = 0; k < D; ++k) {
        G(k, i) = gamma * (xi(k) - mean) / s + delta;
        gx += G(k, i) * (xi(k) - c(i * D + k));
        sum += xi(k);
      }
      E += gx - (T(D) * gamma * s + delta * sum);  // E_LN and -c . g
    }
    for (Index h = 0; h < H; ++h) {
      const Matrix<T> K = MatMul(WK.middleRows(h * Y, Y), G);
      const Matrix<T> Q = MatMul(WQ.middleRows(h * Y, Y), G);
      for (Index i = 0; i < N; ++i) {
        if (graph.offsets[i] == graph.offsets[i + 1]) continue;
        std::vector<T> a;
        for (Index e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e)
          a.push_back(T(beta) * K.col(graph.neighbors[e]).dot(Q.col(i)));
        T m = a[0];
        for (const T& ai : a) if (ai > m) m = ai;
        T acc(0);
        for (const T& ai : a) acc += exp(ai - m);
        E -= (m + log(acc)) / T(beta);
      }
    }
    for (Index i = 0; i < N && M > 0; ++i) {
      Vector<T> t = MatVec(Xi.transpose(), G.col(i));
      if (relu) {
        for (Index mu = 0; mu < M; ++mu) if (t(mu) > T(0)) E -= T(0.5) * t(mu) * t(mu);
      } else {
        t *= T(memory_beta);
        T m = t(0);
        for (Index mu = 1; mu < M; ++mu) if (t(mu) > m) m = t(mu);
        T acc(0);
        for (Index mu = 0; mu < M; ++mu) acc += exp(t(mu) - m);
        E -= (m + log(acc)) / T(memory_beta);
      }
    }
    return E;
  }
};
using Reference = implicit::AutoDiffEnergy<GraphEtFunctor, double>;

Options MakeOptions(Index D, Index H, Index Y, Index M, Memory memory, bool learn_ln,
                    double eps = 1e-3) {
  Options o;
  o.node_dim = D;
  o.num_heads = H;
  o.head_dim = Y;
  o.num_memories = M;
  o.memory = memory;
  o.memory_beta = 1.3;
  o.gamma = 1.2;
  o.delta = 0.3;
  o.eps = eps;
  o.learnable_layer_norm = learn_ln;
  return o;
}

GraphEtFunctor FunctorFor(const Get& et, const Graph& g) {
  const Options& o = et.options();
  return GraphEtFunctor{g, o.node_dim, o.num_heads, o.head_dim, o.num_memories,
                        o.memory == Memory::kRelu, et.beta(), o.memory_beta, o.eps, o.gamma,
                        o.delta, o.learnable_layer_norm};
}

struct Config {
  Index N, H, M;
  Memory memory;
  bool learn_ln, input;
};

const Config kConfigs[] = {
    {5, 2, 6, Memory::kRelu, true, true},     {6, 2, 5, Memory::kSoftmax, false, false},
    {7, 2, 4, Memory::kRelu, false, true},    {5, 1, 0, Memory::kRelu, true, false},
    {6, 0, 5, Memory::kSoftmax, true, true},
};

std::string Describe(const Config& c) {
  return "N " + std::to_string(c.N) + " heads " + std::to_string(c.H) + " memories " +
         std::to_string(c.M) + " softmax " + std::to_string(c.memory == Memory::kSoftmax) +
         " learnable LN " + std::to_string(c.learn_ln) + " input " + std::to_string(c.input);
}

// Input VJP of an energy or map against central differences in the input.
template <typename F>
double InputVjpError(const Matrix<double>& ivjp, const Matrix<double>& c, const Matrix<double>& u,
                     F&& output_at) {
  const double h = 1e-6;
  Matrix<double> fd(c.rows(), c.cols());
  for (Index i = 0; i < c.rows(); ++i) {
    Matrix<double> cp = c, cm = c;
    cp.row(i).array() += h;
    cm.row(i).array() -= h;
    fd.row(i) = ((output_at(cp) - output_at(cm)).array() * u.array()).colwise().sum() / (2 * h);
  }
  return (ivjp - fd).norm() / (1 + fd.norm());
}

}  // namespace

BOOST_AUTO_TEST_CASE(closed_form_derivatives_match_autodiff_and_finite_differences) {
  const Index D = 4, Y = 3, B = 2;
  for (const Config& c : kConfigs) {
    BOOST_TEST_CONTEXT(Describe(c)) {
      const Graph g = RandomGraph(c.N, 40 + static_cast<unsigned>(c.N));
      Get et(MakeOptions(D, c.H, Y, c.M, c.memory, c.learn_ln), g.offsets, g.neighbors);
      et.Initialize(3, 0.7);
      const Matrix<double> x = RandomMatrix<double>(c.N * D, B, 4, 1.5);
      const Matrix<double> input = RandomMatrix<double>(c.N * D, B, 5);
      if (c.input) et.SetInput(input);
      Reference reference(FunctorFor(et, g), c.N * D, c.N * D, *et.parameters());
      reference.SetInput(c.input ? input : Matrix<double>::Zero(c.N * D, B));
      implicit::testing::CheckEnergyAgainstReference(et, reference, x, 1e-10);
      implicit::testing::CheckEnergyFiniteDifferences(et, x, 2e-6);
      if (c.input) {
        const Matrix<double> u = RandomMatrix<double>(c.N * D, B, 6);
        Matrix<double> ivjp(c.N * D, B), ref(c.N * D, B);
        et.InputVectorJacobianProduct(x, u, ivjp);
        reference.InputVectorJacobianProduct(x, u, ref);
        BOOST_TEST((ivjp - ref).norm() <= 1e-10 * (1 + ref.norm()));
        BOOST_TEST(InputVjpError(ivjp, input, u, [&](const Matrix<double>& ci) {
                     et.SetInput(ci);
                     Matrix<double> grad(c.N * D, B);
                     et.Gradient(x, grad);
                     return grad;
                   }) <= 1e-7);
        et.SetInput(input);
      }
    }
  }
}

// float: the same products as the double reference, to float accuracy.
BOOST_AUTO_TEST_CASE(float_matches_the_double_reference) {
  const Index N = 6, D = 4, B = 2;
  const Graph g = RandomGraph(N, 7);
  for (Memory memory : {Memory::kRelu, Memory::kSoftmax}) {
    const Options o = MakeOptions(D, 2, 3, 5, memory, true);
    Get et(o, g.offsets, g.neighbors);
    et.Initialize(8, 0.7);
    implicit::GraphEnergyTransformer<float> ef(o, g.offsets, g.neighbors);
    ef.parameters()->values() = et.parameters()->values().cast<float>();
    const Matrix<double> x = RandomMatrix<double>(N * D, B, 9);
    const Matrix<double> c = RandomMatrix<double>(N * D, B, 10);
    et.SetInput(c);
    ef.SetInput(c.cast<float>());
    Reference reference(FunctorFor(et, g), N * D, N * D, *et.parameters());
    reference.SetInput(c);
    const Matrix<float> xf = x.cast<float>(), vf = RandomMatrix<float>(N * D, B, 11);
    Matrix<double> gd(N * D, B), hd(N * D, B);
    Matrix<float> gf(N * D, B), hf(N * D, B);
    Vector<double> ed(B), pd(et.num_parameters());
    Vector<float> ef_values(B), pf(ef.num_parameters());
    reference.GradientAndValue(x, gd, ed);
    reference.HessianVectorProduct(x, vf.cast<double>(), hd);
    reference.ParameterVectorJacobianProduct(x, vf.cast<double>(), pd);
    ef.GradientAndValue(xf, gf, ef_values);
    ef.HessianVectorProduct(xf, vf, hf);
    ef.ParameterVectorJacobianProduct(xf, vf, pf);
    auto rel = [](const auto& a, const auto& b) { return (a - b).norm() / (1 + b.norm()); };
    BOOST_TEST(rel(ef_values.cast<double>(), ed) <= 1e-5);
    BOOST_TEST(rel(gf.cast<double>(), gd) <= 1e-5);
    BOOST_TEST(rel(hf.cast<double>(), hd) <= 1e-4);
    BOOST_TEST(rel(pf.cast<double>(), pd) <= 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(descent_direction_is_dE_dg_and_energy_never_increases) {
  const Index N = 7, D = 4, B = 3;
  const Graph g = RandomGraph(N, 12);
  for (Memory memory : {Memory::kRelu, Memory::kSoftmax}) {
    BOOST_TEST_CONTEXT("softmax memory " << (memory == Memory::kSoftmax)) {
      Get et(MakeOptions(D, 2, 3, 8, memory, false), g.offsets, g.neighbors);
      et.Initialize(13, 1.0);
      et.SetInput(RandomMatrix<double>(N * D, B, 14));
      Matrix<double> x = RandomMatrix<double>(N * D, B, 15, 2.0);
      // dE/dx = (dg/dx)^T dE/dg, with dg/dx by finite differences of LayerNorm.
      Matrix<double> d(N * D, B), grad(N * D, B), jt(N * D, B), gp(N * D, B), gm(N * D, B);
      et.DescentDirection(x, d);
      et.Gradient(x, grad);
      const double h = 1e-6;
      for (Index i = 0; i < N * D; ++i) {
        Matrix<double> xp = x, xm = x;
        xp.row(i).array() += h;
        xm.row(i).array() -= h;
        et.LayerNorm(xp, gp);
        et.LayerNorm(xm, gm);
        jt.row(i) = (((gp - gm) / (2 * h)).array() * d.array()).colwise().sum();
      }
      BOOST_TEST((grad - jt).norm() <= 1e-7 * (1 + grad.norm()));
      BOOST_TEST(((grad.array() * d.array()).colwise().sum() >= 0).all());
      // x <- x - a dE/dg: E never rises, and falls overall.
      Vector<double> e(B), e_next(B), e0(B);
      et.Value(x, e);
      e0 = e;
      bool monotone = true;
      for (int t = 0; t < 200; ++t) {
        et.DescentDirection(x, d);
        x -= 0.02 * d;
        et.Value(x, e_next);
        monotone = monotone && (e_next.array() <= e.array() + 1e-12).all();
        e = e_next;
      }
      BOOST_TEST(monotone);
      BOOST_TEST((e.array() < e0.array() - 1e-3).all());
      BOOST_TEST(x.allFinite());
    }
  }
}

BOOST_AUTO_TEST_CASE(relabelling_the_nodes_permutes_everything) {
  const Index N = 6, D = 4, B = 2;
  const Graph g = RandomGraph(N, 16);
  std::vector<Index> perm(N);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(17));
  const Graph pg = Relabel(g, perm);
  Options o = MakeOptions(D, 2, 3, 6, Memory::kSoftmax, true, /*eps=*/1.0);
  Get et(o, g.offsets, g.neighbors), pet(o, pg.offsets, pg.neighbors);
  et.Initialize(18, 0.6);
  pet.parameters()->values() = et.parameters()->values();
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 19);
  const Matrix<double> c = RandomMatrix<double>(N * D, B, 20);
  const Matrix<double> v = RandomMatrix<double>(N * D, B, 21);
  et.SetInput(c);
  pet.SetInput(Permute(c, perm, D));
  const Matrix<double> px = Permute(x, perm, D), pv = Permute(v, perm, D);
  Vector<double> e(B), pe(B), th(et.num_parameters()), pth(et.num_parameters());
  Matrix<double> grad(N * D, B), pgrad(N * D, B), hv(N * D, B), phv(N * D, B);
  et.GradientAndValue(x, grad, e);
  pet.GradientAndValue(px, pgrad, pe);
  et.HessianVectorProduct(x, v, hv);
  pet.HessianVectorProduct(px, pv, phv);
  et.ParameterVectorJacobianProduct(x, v, th);
  pet.ParameterVectorJacobianProduct(px, pv, pth);
  BOOST_TEST((e - pe).norm() <= 1e-12 * (1 + e.norm()));
  BOOST_TEST((Permute(grad, perm, D) - pgrad).norm() <= 1e-12 * (1 + grad.norm()));
  BOOST_TEST((Permute(hv, perm, D) - phv).norm() <= 1e-12 * (1 + hv.norm()));
  BOOST_TEST((th - pth).norm() <= 1e-12 * (1 + th.norm()));
  // Equilibria: solving the relabelled problem from the relabelled start
  // gives the relabelled equilibrium.
  GetMap map(et, 0.5), pmap(pet, 0.5);
  implicit::AndersonSolver<double>::Options options;
  options.absolute_tolerance = 1e-11;
  options.max_iterations = 1000;
  implicit::AndersonSolver<double> solver(options);
  Matrix<double> z = c, pz = Permute(c, perm, D);
  BOOST_TEST(solver.Solve(map, z).IsConverged());
  BOOST_TEST(solver.Solve(pmap, pz).IsConverged());
  BOOST_TEST((Permute(z, perm, D) - pz).norm() <= 1e-8 * (1 + z.norm()));
  BOOST_TEST((z - c).norm() > 1e-2);  // the attention and memory did move the states
}

BOOST_AUTO_TEST_CASE(isolated_nodes_and_self_loops) {
  const Index D = 4, Y = 3, B = 2;
  // Only isolated nodes: the attention term vanishes, so the energy is that
  // of the same model without heads (same Xi).
  const Graph empty = FromLists({{}, {}, {}});
  Get et(MakeOptions(D, 2, Y, 5, Memory::kRelu, false), empty.offsets, empty.neighbors);
  Get no_heads(MakeOptions(D, 0, Y, 5, Memory::kRelu, false), empty.offsets, empty.neighbors);
  const auto xi = et.parameter_set().Block("Xi");
  no_heads.parameters()->values() = Eigen::Map<const Vector<double>>(xi.data(), xi.size());
  const Matrix<double> x = RandomMatrix<double>(3 * D, B, 22);
  Vector<double> e(B), e0(B);
  Matrix<double> d(3 * D, B), d0(3 * D, B);
  et.Value(x, e);
  no_heads.Value(x, e0);
  et.DescentDirection(x, d);
  no_heads.DescentDirection(x, d0);
  BOOST_TEST((e - e0).norm() <= 1e-12 * (1 + e.norm()));
  BOOST_TEST((d - d0).norm() <= 1e-12 * (1 + d.norm()));
  // One node with a self-loop: E_ATT = -(1/beta) beta k . q = -(W_K g) . (W_Q g).
  const Graph loop = FromLists({{0}});
  Get one(MakeOptions(D, 2, Y, 0, Memory::kRelu, false), loop.offsets, loop.neighbors);
  Get alone(MakeOptions(D, 0, Y, 0, Memory::kRelu, false), std::vector<Index>{0, 0}, {});
  const Matrix<double> x1 = RandomMatrix<double>(D, 1, 23);
  Matrix<double> g1(D, 1);
  one.LayerNorm(x1, g1);
  Vector<double> e1(1), e_ln(1);
  one.Value(x1, e1);
  alone.Value(x1, e_ln);
  const Vector<double> k = one.parameter_set().Block("W_K") * g1.col(0);
  const Vector<double> q = one.parameter_set().Block("W_Q") * g1.col(0);
  const double kq = k.dot(q);
  BOOST_TEST(std::abs(e1(0) - (e_ln(0) - kq)) <= 1e-12 * (1 + std::abs(e1(0))));
  // A node that only attends to itself next to an isolated one: derivatives
  // exact (finite differences), and the isolated node's residual has no
  // attention force.
  const Graph mixed = FromLists({{0}, {}, {0, 1, 2}});
  Get m(MakeOptions(D, 2, Y, 3, Memory::kSoftmax, true), mixed.offsets, mixed.neighbors);
  m.Initialize(24, 0.8);
  implicit::testing::CheckEnergyFiniteDifferences(m, RandomMatrix<double>(3 * D, B, 25), 2e-6);
}

// Node energies: per node and term, they sum to E; their vector-Jacobian
// products in x, in the parameters and in the input match central
// differences; with W_K = 0 every score is equal and node i's attention term
// is -(1/beta) log deg_i.
BOOST_AUTO_TEST_CASE(node_energies_sum_to_the_energy_and_their_products_are_exact) {
  const Index D = 4, Y = 3, B = 2;
  for (const Config& c : kConfigs) {
    BOOST_TEST_CONTEXT(Describe(c)) {
      const Graph g = RandomGraph(c.N, 60 + static_cast<unsigned>(c.N));
      Get et(MakeOptions(D, c.H, Y, c.M, c.memory, c.learn_ln), g.offsets, g.neighbors);
      et.Initialize(61, 0.8);
      const Matrix<double> input = RandomMatrix<double>(c.N * D, B, 60);
      if (c.input) et.SetInput(input);
      const Index T = et.num_node_terms();
      BOOST_TEST(T == 2 + c.H + (c.M == 0 ? 0 : c.memory == Memory::kRelu ? c.M : 1));
      const Matrix<double> x = RandomMatrix<double>(c.N * D, B, 62, 1.5);
      Matrix<double> terms(T * c.N, B);
      et.NodeEnergies(x, terms);
      Vector<double> e(B);
      et.Value(x, e);
      BOOST_TEST((terms.colwise().sum().transpose() - e).norm() <= 1e-12 * (1 + e.norm()));

      const Matrix<double> v = RandomMatrix<double>(T * c.N, B, 63);
      Matrix<double> dx(c.N * D, B), dc;
      Vector<double> dtheta(et.num_parameters());
      et.NodeEnergiesVectorJacobianProduct(x, v, dx, dtheta, c.input ? &dc : nullptr);
      auto weighted = [&](const Matrix<double>& at) {
        Matrix<double> t(T * c.N, B);
        et.NodeEnergies(at, t);
        return (t.array() * v.array()).sum();
      };
      const double h = 1e-6;
      Matrix<double> fd_x(c.N * D, B);
      for (Index k = 0; k < x.size(); ++k) {
        Matrix<double> xp = x, xm = x;
        xp(k) += h;
        xm(k) -= h;
        fd_x(k) = (weighted(xp) - weighted(xm)) / (2 * h);
      }
      BOOST_TEST((dx - fd_x).norm() <= 1e-7 * (1 + fd_x.norm()));
      Vector<double> fd_theta(et.num_parameters());
      Vector<double>& theta = et.parameters()->values();
      for (Index k = 0; k < theta.size(); ++k) {
        const double t0 = theta(k);
        theta(k) = t0 + h;
        const double up = weighted(x);
        theta(k) = t0 - h;
        const double down = weighted(x);
        theta(k) = t0;
        fd_theta(k) = (up - down) / (2 * h);
      }
      BOOST_TEST((dtheta - fd_theta).norm() <= 1e-7 * (1 + fd_theta.norm()));
      if (c.input) {
        Matrix<double> fd_c(c.N * D, B);
        for (Index k = 0; k < input.size(); ++k) {
          Matrix<double> cp = input, cm = input;
          cp(k) += h;
          cm(k) -= h;
          et.SetInput(cp);
          const double up = weighted(x);
          et.SetInput(cm);
          fd_c(k) = (up - weighted(x)) / (2 * h);
        }
        et.SetInput(input);
        BOOST_TEST((dc - fd_c).norm() <= 1e-7 * (1 + fd_c.norm()));
      } else {
        BOOST_CHECK_THROW(et.NodeEnergiesVectorJacobianProduct(x, v, dx, dtheta, &dc), std::logic_error);
      }
    }
  }
  // Equal scores: the attention term is -(1/beta) log deg_i (0 without neighbours).
  const Graph g = RandomGraph(7, 64);
  Get et(MakeOptions(D, 2, Y, 0, Memory::kRelu, false), g.offsets, g.neighbors);
  et.Initialize(65, 0.8);
  et.parameters()->Block("W_K").setZero();
  Matrix<double> terms(4 * 7, 1);
  et.NodeEnergies(RandomMatrix<double>(7 * D, 1, 66), terms);
  for (Index i = 0; i < 7; ++i) {
    const double deg = static_cast<double>(g.offsets[i + 1] - g.offsets[i]);
    const double expected = deg == 0 ? 0.0 : -std::log(deg) / et.beta();
    for (Index h = 0; h < 2; ++h) BOOST_TEST(std::abs(terms(4 * i + Get::kFirstHeadTerm + h) - expected) <= 1e-12);
  }
  // float: the same terms and products as double, to float accuracy.
  implicit::GraphEnergyTransformer<float> ef(MakeOptions(D, 2, Y, 5, Memory::kRelu, true),
                                             g.offsets, g.neighbors);
  Get ed(ef.options(), g.offsets, g.neighbors);
  ed.Initialize(67, 0.8);
  ef.parameters()->values() = ed.parameters()->values().cast<float>();
  const Matrix<double> x = RandomMatrix<double>(7 * D, B, 68);
  const Index T = ed.num_node_terms();
  const Matrix<double> v = RandomMatrix<double>(T * 7, B, 69);
  Matrix<double> td(T * 7, B), dxd(7 * D, B);
  Matrix<float> tf(T * 7, B), dxf(7 * D, B);
  Vector<double> pd(ed.num_parameters());
  Vector<float> pf(ef.num_parameters());
  ed.NodeEnergies(x, td);
  ef.NodeEnergies(x.cast<float>(), tf);
  ed.NodeEnergiesVectorJacobianProduct(x, v, dxd, pd);
  ef.NodeEnergiesVectorJacobianProduct(x.cast<float>(), v.cast<float>(), dxf, pf);
  auto rel = [](const auto& a, const auto& b) { return (a - b).norm() / (1 + b.norm()); };
  BOOST_TEST(rel(tf.cast<double>(), td) <= 1e-5);
  BOOST_TEST(rel(dxf.cast<double>(), dxd) <= 1e-4);
  BOOST_TEST(rel(pf.cast<double>(), pd) <= 1e-4);
  // Shapes are checked.
  Matrix<double> wrong(T * 7 + 1, B);
  BOOST_CHECK_THROW(ed.NodeEnergies(x, wrong), std::invalid_argument);
  BOOST_CHECK_THROW(ed.NodeEnergiesVectorJacobianProduct(x, wrong, dxd, pd), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(map_products_are_exact) {
  const Index N = 5, D = 4, B = 2;
  const Graph g = RandomGraph(N, 26);
  Get et(MakeOptions(D, 2, 3, 5, Memory::kSoftmax, true), g.offsets, g.neighbors);
  et.Initialize(27, 0.6);
  GetMap map(et, 0.7);
  const Matrix<double> x = RandomMatrix<double>(N * D, B, 28);
  implicit::testing::CheckMapFiniteDifferences(map, x, 1e-7, "no input", map.parameters(), nullptr,
                                               Matrix<double>(), 1e-6);
  BOOST_TEST(map.SupportsSubsets());
  const Matrix<double> c = RandomMatrix<double>(N * D, B, 29);
  et.SetInput(c);
  BOOST_TEST(map.input_dimension() == N * D);
  BOOST_TEST(!map.SupportsSubsets());
  // f and E from one pass equal the separate calls.
  Matrix<double> f(N * D, B), f1(N * D, B);
  Vector<double> e(B), e1(B);
  map.Evaluate(x, f);
  et.Value(x, e);
  map.EvaluateWithEnergy(x, f1, e1);
  BOOST_TEST((f - f1).norm() <= 1e-13 * (1 + f.norm()));
  BOOST_TEST((e - e1).norm() <= 1e-13 * (1 + e.norm()));
  implicit::testing::CheckMapFiniteDifferences(
      map, x, 1e-7, "input", map.parameters(), [&](const Matrix<double>& ci) { et.SetInput(ci); },
      c, 1e-6);
}

// Picard, Anderson and gradient flow reach the same fixed point (dE/dg = 0,
// so grad E = 0 too); the IFT gradient (GMRES) of a loss of the equilibrium
// matches finite differences of the loss at re-solved equilibria, for every
// parameter and for the input.
BOOST_AUTO_TEST_CASE(solvers_reach_fixed_points_and_ift_gradients_are_exact) {
  const Index D = 3, B = 2;
  const Graph g = FromLists({{1, 2}, {0, 1}, {0, 3}, {}});
  const Index N = g.nodes();
  Get et(MakeOptions(D, 1, 2, 4, Memory::kSoftmax, true, /*eps=*/1.0), g.offsets, g.neighbors);
  et.Initialize(30, 0.6);
  Matrix<double> c = RandomMatrix<double>(N * D, B, 31);
  et.SetInput(c);
  GetMap map(et, 0.5);
  implicit::AndersonSolver<double>::Options aopt;
  aopt.absolute_tolerance = 1e-12;
  aopt.max_iterations = 2000;
  implicit::AndersonSolver<double> anderson(aopt);
  implicit::PicardSolver<double>::Options popt;
  popt.absolute_tolerance = 1e-12;
  popt.max_iterations = 5000;
  implicit::GradientFlowSolver<double>::Options fopt;
  fopt.step_size = 0.5;
  fopt.check_monotone = true;
  fopt.absolute_tolerance = 1e-12;
  fopt.max_iterations = 5000;
  Matrix<double> za = c, zp = c, zf = c, d(N * D, B), grad(N * D, B);
  BOOST_TEST(anderson.Solve(map, za).IsConverged());
  BOOST_TEST(implicit::PicardSolver<double>(popt).Solve(map, zp).IsConverged());
  BOOST_TEST(implicit::GradientFlowSolver<double>(fopt).Solve(map, zf).IsConverged());
  et.DescentDirection(za, d);
  et.Gradient(za, grad);
  BOOST_TEST(d.norm() <= 1e-10);
  BOOST_TEST(grad.norm() <= 1e-10);
  BOOST_TEST((zp - za).norm() <= 1e-9);
  BOOST_TEST((zf - za).norm() <= 1e-9);

  const Matrix<double> target = RandomMatrix<double>(N * D, B, 32);
  implicit::ImplicitLayer<double> layer(map, anderson);
  auto loss_at = [&](Matrix<double>* dldz) {
    Matrix<double> z = et.input();
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    if (dldz) *dldz = z - target;
    return 0.5 * (z - target).squaredNorm();
  };
  Matrix<double> dldz;
  loss_at(&dldz);
  const implicit::BackwardResult<double> r = layer.Backward(dldz);
  BOOST_REQUIRE(r.ok());
  Vector<double>& theta = et.parameters()->values();
  const double h = 1e-6;
  double worst = 0;
  for (Index k = 0; k < theta.size(); ++k) {
    const double saved = theta(k);
    theta(k) = saved + h;
    const double lp = loss_at(nullptr);
    theta(k) = saved - h;
    const double lm = loss_at(nullptr);
    theta(k) = saved;
    worst = std::max(worst, std::abs(r.parameter_gradient(k) - (lp - lm) / (2 * h)));
  }
  BOOST_TEST(worst <= 1e-6);
  BOOST_TEST(r.parameter_gradient.norm() > 1e-3);
  worst = 0;
  for (Index i = 0; i < N * D; i += 2) {
    Matrix<double> cp = c, cm = c;
    cp(i, 1) += h;
    cm(i, 1) -= h;
    et.SetInput(cp);
    const double lp = loss_at(nullptr);
    et.SetInput(cm);
    const double lm = loss_at(nullptr);
    worst = std::max(worst, std::abs(r.input_gradient(i, 1) - (lp - lm) / (2 * h)));
  }
  et.SetInput(c);
  BOOST_TEST(worst <= 1e-6);
}

using Scalars = std::tuple<float, double>;

// A loss read from the node energies at the equilibrium, L = <v, t(z*, theta, c)>
// (implicit-graph's ET readout): the IFT gradients of dL/dz* plus the terms'
// own derivatives in theta and c match central differences at re-solved
// equilibria.
BOOST_AUTO_TEST_CASE(node_energy_readout_at_the_equilibrium_has_exact_gradients) {
  const Index D = 3, B = 1;
  const Graph g = FromLists({{1, 2}, {0, 1}, {0, 3}, {}});
  const Index N = g.nodes();
  Get et(MakeOptions(D, 2, 2, 4, Memory::kRelu, false, /*eps=*/1.0), g.offsets, g.neighbors);
  et.Initialize(70, 0.6);
  const Matrix<double> c = RandomMatrix<double>(N * D, B, 71);
  et.SetInput(c);
  GetMap map(et, 0.5);
  implicit::AndersonSolver<double>::Options aopt;
  aopt.absolute_tolerance = 1e-12;
  aopt.max_iterations = 2000;
  implicit::AndersonSolver<double> anderson(aopt);
  implicit::ImplicitLayer<double> layer(map, anderson);
  const Index T = et.num_node_terms();
  const Matrix<double> v = RandomMatrix<double>(T * N, B, 72);
  Matrix<double> z;
  auto loss_at = [&]() {
    z = et.input();
    BOOST_REQUIRE(layer.Forward(z).IsConverged());
    Matrix<double> t(T * N, B);
    et.NodeEnergies(z, t);
    return (t.array() * v.array()).sum();
  };
  loss_at();
  Matrix<double> dldz(N * D, B), dc;
  Vector<double> direct(et.num_parameters());
  et.NodeEnergiesVectorJacobianProduct(z, v, dldz, direct, &dc);
  const implicit::BackwardResult<double> r = layer.Backward(dldz);
  BOOST_REQUIRE(r.ok());
  const Vector<double> total = r.parameter_gradient + direct;
  const Matrix<double> total_c = r.input_gradient + dc;
  Vector<double>& theta = et.parameters()->values();
  const double h = 1e-6;
  double worst = 0;
  for (Index k = 0; k < theta.size(); ++k) {
    const double saved = theta(k);
    theta(k) = saved + h;
    const double lp = loss_at();
    theta(k) = saved - h;
    const double lm = loss_at();
    theta(k) = saved;
    worst = std::max(worst, std::abs(total(k) - (lp - lm) / (2 * h)));
  }
  BOOST_TEST(worst <= 1e-6);
  BOOST_TEST(direct.norm() > 1e-3);  // the terms' own dependence on theta matters
  worst = 0;
  for (Index i = 0; i < N * D; ++i) {
    Matrix<double> cp = c, cm = c;
    cp(i) += h;
    cm(i) -= h;
    et.SetInput(cp);
    const double lp = loss_at();
    et.SetInput(cm);
    const double lm = loss_at();
    worst = std::max(worst, std::abs(total_c(i) - (lp - lm) / (2 * h)));
  }
  et.SetInput(c);
  BOOST_TEST(worst <= 1e-6);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_pass_evaluations_and_subsets, S, Scalars) {
  const double tol = sizeof(S) == 4 ? 2e-5 : 1e-12;
  const Index N = 6, D = 4, B = 3;
  const Graph g = RandomGraph(N, 33);
  implicit::GraphEnergyTransformer<S> et(MakeOptions(D, 2, 3, 5, Memory::kRelu, true),
                                         g.offsets, g.neighbors);
  et.Initialize(34, 0.7);
  const Matrix<S> x = RandomMatrix<S>(N * D, B, 35);
  implicit::testing::CheckOnePassEvaluations<S>(et, x, tol);
  BOOST_TEST(et.SupportsSubsets());
  implicit::testing::CheckSubsetEvaluation<S>(et, x, tol);
  et.SetInput(RandomMatrix<S>(N * D, B, 36));
  BOOST_TEST(!et.SupportsSubsets());
  implicit::testing::CheckOnePassEvaluations<S>(et, x, tol);
}

BOOST_AUTO_TEST_CASE(bad_adjacency_and_options_are_rejected) {
  const Options o = MakeOptions(4, 1, 2, 3, Memory::kRelu, false);
  auto expect = [&](std::vector<Index> offsets, std::vector<Index> neighbors,
                    const std::string& words, const Options& opt) {
    try {
      Get et(opt, std::move(offsets), std::move(neighbors));
      BOOST_ERROR("expected std::invalid_argument mentioning '" << words << "'");
    } catch (const std::invalid_argument& e) {
      BOOST_TEST_INFO("message: " << e.what());
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos);
    }
  };
  expect({}, {}, "N + 1 >= 2", o);
  expect({0}, {}, "N + 1 >= 2", o);
  expect({1, 1, 2}, {0, 1}, "row_offsets[0] must be 0", o);
  expect({0, 2, 1, 3}, {0, 1, 2}, "non-decreasing", o);
  expect({0, 1, 2}, {0, 1, 1}, "must equal neighbors.size()", o);
  expect({0, 1, 2}, {0, 2}, "out of range", o);
  expect({0, 1, 2}, {0, -1}, "out of range", o);
  expect({0, 2, 2}, {1, 0}, "sorted", o);
  expect({0, 2, 2}, {1, 1}, "duplicates", o);
  Options bad = o;
  bad.node_dim = 1;
  expect({0, 0}, {}, "node_dim", bad);
  bad = o;
  bad.head_dim = 0;
  expect({0, 0}, {}, "head_dim", bad);
  bad = o;
  bad.gamma = 0;
  expect({0, 0}, {}, "gamma", bad);
  // Shapes and the input's batch size.
  Get et(o, {0, 1, 2}, {1, 0});
  Matrix<double> x(8, 2), wrong(7, 2), out(8, 2);
  x.setRandom();
  BOOST_CHECK_THROW(et.Gradient(wrong, out), std::invalid_argument);
  BOOST_CHECK_THROW(et.SetInput(wrong), std::invalid_argument);
  et.SetInput(Matrix<double>::Zero(8, 3));
  BOOST_CHECK_THROW(et.Gradient(x, out), std::invalid_argument);
  et.ClearInput();
  BOOST_CHECK_NO_THROW(et.Gradient(x, out));
  BOOST_CHECK_THROW(et.InputVectorJacobianProduct(x, x, out), std::logic_error);
  BOOST_CHECK_THROW(GetMap(et, 0.0), std::invalid_argument);
}
