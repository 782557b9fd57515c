/// \file
/// Modern Hopfield networks (Ramsauer et al.) as energies and as layers: the
/// umbrella header of the Hopfield family. Each part has its own header, which
/// opens with its usage:
///
/// \code{.unparsed}
///   modern_hopfield_energy.h  ModernHopfieldEnergy, the retrieval energy
///                             (core and log_sum_exp.h only: no solver)
///   hopfield_layer_energy.h   HopfieldLayerEnergy, the multi-head layer energy
///   hopfield_layer.h          HopfieldLayer (retrieval or one step, IFT backward)
///                             and HopfieldGradients
///   hopfield_pooling.h        HopfieldPooling (learned queries)
///   hopfield_lookup.h         HopfieldLookup (learned stored patterns)
/// \endcode
///
/// \code
///   implicit::ModernHopfieldEnergy<double> energy(patterns, o);  // n x N patterns
///   implicit::CccpMap<double> map(energy);
///   implicit::PicardSolver<double>().Solve(map, xi);             // retrieval
/// \endcode
#pragma once

#include <implicit/layers/hopfield_layer.h>
#include <implicit/layers/hopfield_layer_energy.h>
#include <implicit/layers/hopfield_lookup.h>
#include <implicit/layers/hopfield_pooling.h>
#include <implicit/layers/modern_hopfield_energy.h>
