/// \file
/// Classical Hopfield networks and dense associative memories (Krotov &
/// Hopfield): the umbrella header of the family. N stored patterns xi_mu
/// (columns of X, n x N) and an interaction function F of the overlap xi_mu . x
/// define the energies
///
/// \code{.unparsed}
///   binary states s in {-1,+1}^n:      E(s) = - sum_mu F(xi_mu . s)
///   continuous states, kEuclidean:     E(x) = - sum_mu F(xi_mu . x) + 0.5 |x|^2
///   continuous states in the box, kBox: E(x) = - sum_mu F(xi_mu . x) + (1/T) sum_i phi(x_i),
///       x in (-1, 1)^n, phi(x) = (1+x)/2 log((1+x)/2) + (1-x)/2 log((1-x)/2)
///       (the entropy barrier of the classical continuous Hopfield network; T > 0)
/// \endcode
///
/// One header per concept, each opening with its usage:
/// \code{.unparsed}
///   interaction_function.h            Interaction, the function F
///   dense_associative_memory_energy.h DenseAssociativeMemoryEnergy (continuous)
///   binary_retrieval.h                RetrieveBinary, BinaryEnergy (+-1 states)
///   separable_energy.h                the kernel shared with rbm.h (internal)
/// \endcode
///
/// \code
///   implicit::Interaction f = implicit::Interaction::Polynomial(3);
///   implicit::RetrieveBinary<double>(X, f, s);   // s: n x B +-1 probes, in place
/// \endcode
#pragma once

#include <implicit/layers/binary_retrieval.h>
#include <implicit/layers/dense_associative_memory_energy.h>
#include <implicit/layers/interaction_function.h>
#include <implicit/layers/separable_energy.h>
