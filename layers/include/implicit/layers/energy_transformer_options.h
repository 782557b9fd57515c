/// \file
/// The options of the Energy Transformer (energy_transformer_energy.h): sizes
/// (tokens N, token dimension D, heads H of width Y, memories M), the memory
/// term (ReLU^2 or softmax), the inverse temperatures, the token LayerNorm and
/// whether its gain and bias are trained. IsValid() explains a bad choice.
///
/// \code
///   implicit::EnergyTransformerOptions o;
///   o.num_tokens = 16; o.token_dim = 32; o.num_heads = 4; o.head_dim = 8;
///   o.num_memories = 64; o.memory = implicit::EnergyTransformerMemory::kSoftmax;
///   std::string error;
///   if (!o.IsValid(&error)) std::cerr << error << "\n";
/// \endcode
#pragma once

#include <implicit/core/types.h>

#include <cmath>
#include <string>

namespace implicit {

/// The Hopfield-memory term of the Energy Transformer.
enum class EnergyTransformerMemory {
  kRelu,     ///< E_HN = -0.5 sum ReLU(xi_mu . g_B)^2
  kSoftmax,  ///< E_HN = -(1/beta_m) sum_B lse_mu(beta_m xi_mu . g_B)
};

/// The options of the Energy Transformer (EnergyTransformer::Options): sizes,
/// memory term, inverse temperatures and the token LayerNorm.
struct EnergyTransformerOptions {
  /// N: tokens per sample (>= 1; >= 2 when attention excludes self-pairs; must
  /// be set).
  Index num_tokens = 0;
  /// D: dimension of one token (>= 2, LayerNorm needs a variance; must be set).
  Index token_dim = 0;
  /// H: attention heads (0 disables E_ATT; default 1).
  Index num_heads = 1;
  /// Y: key/query dimension per head (>= 1 when num_heads > 0).
  Index head_dim = 0;
  /// M: Hopfield memories (0, the default, disables E_HN).
  Index num_memories = 0;
  /// Which Hopfield-memory energy E_HN uses (default kRelu).
  EnergyTransformerMemory memory = EnergyTransformerMemory::kRelu;
  /// Attention inverse temperature beta; 0 means the default 1/sqrt(head_dim).
  double beta = 0.0;
  /// Inverse temperature beta_m of the softmax memory (> 0, default 1; unused
  /// for ReLU).
  double memory_beta = 1.0;
  ///@{
  /// LayerNorm scale gamma (> 0: makes the Lagrangian convex; default 1) and
  /// bias delta (default 0).
  double gamma = 1.0;
  double delta = 0.0;
  ///@}
  /// LayerNorm variance floor eps (> 0; default 1e-5).
  double eps = 1e-5;
  /// Exclude B = C (a token attending to itself) from the attention sum
  /// (default true).
  bool exclude_self = true;
  /// Register "gamma" and "delta" as trainable parameters (initialised from
  /// the two fields above); otherwise (the default) they are the constants
  /// above.
  bool learnable_layer_norm = false;

  /// True when the options are consistent; otherwise false, with the bad
  /// choice explained in *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    auto fail = [&](const std::string& message) {
      if (error) *error = message;
      return false;
    };
    if (num_tokens < 1) return fail("num_tokens must be >= 1, got " + std::to_string(num_tokens));
    if (token_dim < 2) return fail("token_dim must be >= 2, got " + std::to_string(token_dim));
    if (num_heads < 0) return fail("num_heads must be >= 0, got " + std::to_string(num_heads));
    if (num_heads > 0 && head_dim < 1) {
      return fail("head_dim must be >= 1 when num_heads > 0, got " + std::to_string(head_dim));
    }
    if (num_heads > 0 && exclude_self && num_tokens < 2) {
      return fail("num_tokens must be >= 2 when exclude_self is set, got " +
                  std::to_string(num_tokens));
    }
    if (num_memories < 0) {
      return fail("num_memories must be >= 0, got " + std::to_string(num_memories));
    }
    if (!(beta >= 0.0) || !std::isfinite(beta)) {
      return fail("beta must be finite and >= 0 (0: 1/sqrt(head_dim)), got " + std::to_string(beta));
    }
    if (!(memory_beta > 0.0) || !std::isfinite(memory_beta)) {
      return fail("memory_beta must be finite and > 0, got " + std::to_string(memory_beta));
    }
    if (!(gamma > 0.0) || !std::isfinite(gamma)) {
      return fail("gamma must be finite and > 0, got " + std::to_string(gamma));
    }
    if (!std::isfinite(delta)) return fail("delta must be finite, got " + std::to_string(delta));
    if (!(eps > 0.0) || !std::isfinite(eps)) {
      return fail("eps must be finite and > 0, got " + std::to_string(eps));
    }
    return true;
  }
};

}  // namespace implicit
