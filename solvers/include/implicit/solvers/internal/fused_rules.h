// The fused Picard kernels' rules from a Picard solver's options (internal;
// CUDA builds only): the forward rules of the host monitor that the kernels
// apply on the device (cuda_kernels.h, FusedPicardRules).
//
//   const auto rules = implicit::internal::FusedRules<double>(picard_options);
#pragma once

#ifndef IMPLICIT_WITH_CUDA
#error "implicit/solvers/internal/fused_rules.h needs libimplicit built with CUDA"
#endif

#include <implicit/solvers/internal/fused_picard.h>
#include <implicit/solvers/internal/sample_judge.h>
#include <implicit/solvers/picard.h>

namespace implicit {
namespace internal {

template <typename S>
cuda::internal::FusedPicardRules FusedRules(const typename PicardSolver<S>::Options& options) {
  cuda::internal::FusedPicardRules rules;
  rules.max_iterations = options.max_iterations;
  rules.limits = MakeSampleLimits<S>(options, /*add_tolerances=*/false);
  rules.use_energy = options.use_energy;
  rules.damping = options.damping;
  return rules;
}

}  // namespace internal
}  // namespace implicit
