/// \file
/// Attention as the gradient of a log-normaliser (A. Shim): the umbrella
/// header of the family (one header per class, named after it).
///
/// For an exponential family over keys k with natural parameter eta (the
/// query) and intrinsic (base) measure nu,
///
/// \code{.unparsed}
///   log Z(eta) = log integral exp(<k, eta>) dnu(k),   grad log Z(eta) = E_eta[k],
/// \endcode
///
/// the mean of the keys under the tilted measure. Two intrinsic measures:
///
/// \code{.unparsed}
///   DiscreteLogNormalizer   nu = sum_i exp(m_i) delta_{k_i} over N keys K (d x N):
///       log Z = lse(K^T eta + m),  grad = K softmax(K^T eta + m)   = softmax attention
///                                  hess = K (diag p - p p^T) K^T   = covariance of the keys
///   GaussianLogNormalizer   nu = N(mu, Sigma):
///       log Z = mu . eta + 0.5 eta^T Sigma eta,   grad = mu + Sigma eta,   hess = Sigma
/// \endcode
///
/// Both derive from Energy\<S\> (through LogNormalizerBase, log_normalizer_base.h)
/// as *scalar functions of eta*: Value is log Z, Gradient its gradient (the
/// attention output), HessianVectorProduct the covariance times v,
/// ParameterVectorJacobianProduct d/dtheta <grad log Z, u>;
/// GradientAndValue gives both from one pass, and SupportsSubsets() holds
/// unless the discrete base measure is per sample (N x B).
/// (They are convex functions to ascend, not energies to minimise: do not hand
/// them to an energy minimiser.) Any user log-normaliser written as a templated
/// functor and wrapped in AutoDiffEnergy plugs in the same way.
///
/// Two ways to turn a log-normaliser into an equilibrium layer:
/// \code{.unparsed}
///   LogNormalizerEnergy      E(eta) = 0.5 |eta|^2 - log Z(eta): its CCCP step
///                            eta <- grad log Z(eta) is the attention update
///                            (the discrete case is the modern Hopfield energy at
///                            beta = 1)
///   ResidualLogNormalizerMap f(z; c) = LN(z + a grad log Z(z) + c): the residual
///                            update, one gradient-ascent step of size a on
///                            log Z, followed by the LayerNorm contraction
///                            LN(y) = gamma (y - mean y) / sqrt(var y + eps) + delta,
///                            with an optional input injection c. A FixedPointMap
///                            with JVP / VJP, parameter and input VJPs.
/// \endcode
///
/// \code
///   implicit::GaussianLogNormalizer<double> logz(mu, Sigma);    // d, d x d
///   implicit::ResidualLogNormalizerMap<double> map(logz);       // LN(z + grad log Z(z))
///   implicit::PicardSolver<double>().Solve(map, z);             // z: d x B
/// \endcode
#pragma once

#include <implicit/layers/discrete_log_normalizer.h>
#include <implicit/layers/gaussian_log_normalizer.h>
#include <implicit/layers/log_normalizer_energy.h>
#include <implicit/layers/residual_log_normalizer_map.h>
