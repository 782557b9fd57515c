// implicit-et's default model shape, which implicit-bench's ET problems use
// (--autodiff et, --device cuda et): 17 tokens (CLS and 16 patches) of width
// 32, 8 heads of width 8, 32 memories (ReLU), as implicit-et --dim 32 --heads 8
// --head-dim 8 --memories 32.
//
//   implicit::EnergyTransformer<double> et(ImplicitEtShape());
#pragma once

#include <implicit/layers/energy_transformer_options.h>

namespace implicit_apps {

inline implicit::EnergyTransformerOptions ImplicitEtShape() {
  implicit::EnergyTransformerOptions o;
  o.num_tokens = 17;
  o.token_dim = 32;
  o.num_heads = 8;
  o.head_dim = 8;
  o.num_memories = 32;
  return o;
}

}  // namespace implicit_apps
