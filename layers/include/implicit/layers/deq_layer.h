/// \file
/// DEQ wrappers: turn an explicit block z <- f(z; x, theta) (an MLP, a small
/// transformer-style block, ...) into a FixedPointMap, so that a layer that is
/// not defined by an energy is an implicit layer too: its output is the fixed
/// point z* = f(z*; x, theta), found by any solver, and trained by implicit
/// differentiation (implicit_diff.h) through the map's Jacobian products.
///
/// \code{.unparsed}
///   MlpBlockMap<S>                 built-in: f(z; x) = W2 act(W1 z + U x + b1) + b2,
///                                  closed-form JVP / VJP / parameter and input VJPs
///   ExplicitBlockMap<Functor, S>   any user block written once as a templated
///                                  functor; every product is exact, by forward-mode
///                                  dual numbers (ceres::Jet), like AutoDiffEnergy
/// \endcode
///
/// Contraction. The fixed point is unique and Picard iteration converges when f
/// is a contraction in z. For the MLP block, act is 1-Lipschitz (ReLU, tanh), so
/// Lip_z(f) <= |W2|_2 |W1|_2 = LipschitzBound(); the constructor draws W1 and W2
/// with spectral norms sqrt(Options::init_lipschitz) each, so the block starts
/// as a contraction with constant init_lipschitz (< 1). Training may break this;
/// check LipschitzBound(), or use a damped / accelerated solver.
///
/// \code
///   implicit::MlpBlockMap<double>::Options o;
///   o.state_dim = 16; o.hidden_dim = 32; o.input_dim = 8;
///   implicit::MlpBlockMap<double> block(o);
///   block.SetInput(x);                                   // 8 x B
///   implicit::AndersonSolver<double> solver;
///   implicit::ImplicitLayer<double> layer(block, solver);
///   implicit::Matrix<double> z = implicit::Matrix<double>::Zero(16, x.cols());
///   layer.Forward(z);                                    // z <- z*
///   auto grads = layer.Backward(dLdz);                   // grads.parameter_gradient,
///                                                        // grads.input_gradient
/// \endcode
///
/// A user block: one sample at a time, templated on the scalar type T (double,
/// float, or a ceres::Jet of them), writing f(z; x, theta) into *out (length n):
///
/// \code
///   struct TanhBlock {
///     implicit::Index n, p;
///     template <typename T>
///     void operator()(const implicit::Vector<T>& z, const implicit::Vector<T>& x,
///                     const implicit::Vector<T>& theta, implicit::Vector<T>* out) const {
///       Eigen::Map<const implicit::Matrix<T>> W(theta.data(), n, n), U(theta.data() + n * n, n, p);
///       *out = (W * z + U * x).array().tanh().matrix();
///     }
///   };
///   implicit::ParameterSet<double> params;  params.Add("W", n, n);  params.Add("U", n, p);
///   implicit::ExplicitBlockMap<TanhBlock, double> map(TanhBlock{n, p}, n, p, params);
///   map.SetInput(x);
/// \endcode
///
/// Cost of ExplicitBlockMap per sample, C one evaluation of the block, K = kChunk:
/// Evaluate and JacobianVectorProduct C each; VectorJacobianProduct ceil(n/K)
/// K-wide evaluations; parameter VJP ceil(p/K), input VJP ceil(input_dim/K).
#pragma once

#include <implicit/layers/explicit_block_map.h>
#include <implicit/layers/mlp_block_map.h>
