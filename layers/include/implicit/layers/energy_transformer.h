/// \file
/// The Energy Transformer (Hoover et al., 2023): the umbrella header. Each part
/// has its own header, which opens with its usage:
///
/// \code{.unparsed}
///   energy_transformer_options.h  EnergyTransformerOptions, EnergyTransformerMemory
///   energy_transformer_energy.h   EnergyTransformer, the energy of the tokens
///   energy_transformer_forces.h   its attention and memory terms (internal)
///   energy_transformer_token_norm.h  its token LayerNorm and the chain rule
///                                 through it (internal)
///   energy_transformer_map.h      EnergyTransformerMap, the ET dynamics as a
///                                 fixed-point map (clamped tokens, IFT training)
///   token_mask.h                  TokenMask, per-token masks to coordinates
///   implicit/core/clamped_energy.h  ClampedEnergy, any energy with clamped
///                                 coordinates
/// \endcode
///
/// \code
///   implicit::EnergyTransformer<double> et(o);              // o: the options
///   implicit::EnergyTransformerMap<double> map(et, 0.5);    // x <- x - 0.5 dE/dg
///   map.SetClamp(implicit::TokenMask<double>(masked, D), image);
/// \endcode
#pragma once

#include <implicit/core/clamped_energy.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/energy_transformer_forces.h>
#include <implicit/layers/energy_transformer_map.h>
#include <implicit/layers/energy_transformer_options.h>
#include <implicit/layers/energy_transformer_token_norm.h>
#include <implicit/layers/token_mask.h>
