// implicit-et's optimisers: Adam for the embeddings and decoder and Adam for
// the energy's parameters, both learning rates on one cosine decay.
#pragma once

#include "et/config.h"

#include <implicit/core/optimizers.h>

namespace implicit_apps {

// The two Adam optimisers (embeddings and decoder; the energy's parameters),
// with the cosine decay of both learning rates.
struct Optimizers {
  explicit Optimizers(const Config& c)
      : model(Adam(c.lr)), energy(Adam(c.energy_lr)), lr(c.lr), energy_lr(c.energy_lr) {}
  static implicit::AdamOptimizer<double>::Options Adam(double learning_rate) {
    implicit::AdamOptimizer<double>::Options o;
    o.learning_rate = learning_rate;
    o.clip_norm = 1.0;
    return o;
  }
  void Decay(double factor) {
    model.set_learning_rate(lr * factor);
    energy.set_learning_rate(energy_lr * factor);
  }
  implicit::AdamOptimizer<double> model, energy;
  double lr, energy_lr;
};

}  // namespace implicit_apps
