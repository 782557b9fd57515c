/// \file
/// The options of HopfieldLayer (hopfield_layer.h), also those of
/// HopfieldPooling and HopfieldLookup: the sizes (query and pattern rows,
/// heads, key / value / output widths), which projections are learned, beta
/// (per layer or per head, fixed or trained), the query anchor weight, one-step
/// or retrieval mode, learned inputs, the forward solver and the backward pass.
/// IsValid() names a bad field. HopfieldLayer<Scalar>::Options is this struct.
///
/// \code
///   implicit::HopfieldLayer<double>::Options o;   // = HopfieldLayerOptions<double>
///   o.query_dim = 8; o.pattern_dim = 8; o.num_heads = 2; o.head_dim = 4;
///   std::string error;
///   if (!o.IsValid(&error)) std::cerr << error << "\n";
/// \endcode
#pragma once

#include <implicit/core/types.h>
#include <implicit/diff/backward_options.h>
#include <implicit/solvers/solver.h>

#include <cmath>
#include <memory>
#include <string>

namespace implicit {

/// The options of HopfieldLayer, HopfieldPooling and HopfieldLookup (their
/// Options type): sizes, projections, beta, mode, learned inputs, solver and
/// backward pass.
template <typename Scalar>
struct HopfieldLayerOptions {
  /// Rows d_r of the queries R (> 0; must be set).
  Index query_dim = 0;
  /// Rows d_y of the stored patterns Y (> 0; must be set).
  Index pattern_dim = 0;
  /// Number of heads H (>= 1; default 1).
  Index num_heads = 1;
  /// Key/query width d_k per head; 0 = query_dim / num_heads (must divide).
  Index head_dim = 0;
  /// Value width d_v per head; 0 = head_dim.
  Index value_dim = 0;
  /// Rows d_out of the output Z; 0 = query_dim.
  Index output_dim = 0;
  ///@{
  /// Learned projections W_Q, W_K, W_V, W_O (default true); false = identity
  /// (then the sizes must match: H d_k = d_r for W_Q, H d_k = d_y for W_K,
  /// H d_v = d_y for W_V, d_out = H d_v for W_O).
  bool project_queries = true;
  bool project_keys = true;
  bool project_values = true;
  bool project_output = true;
  ///@}
  /// Initial beta; 0 = 1 / sqrt(d_k) (scaled dot-product attention).
  double beta = 0.0;
  /// One beta per head (block "beta" H x 1) instead of one per layer (1 x 1,
  /// the default).
  bool beta_per_head = false;
  /// Trainable beta (block "beta"; the default); false keeps it fixed.
  bool learn_beta = true;
  /// Anchor weight a in [0, 1) of the query in the energy (see hopfield_layer.h);
  /// 0 (the default) is the plain modern Hopfield energy of each head.
  double query_weight = 0.0;
  /// Forward by one attention step instead of retrieval to convergence (the
  /// default, false).
  bool one_step = false;
  ///@{
  /// HopfieldPooling / HopfieldLookup: number of learned queries (block
  /// "queries", d_r x learned_queries) / learned stored patterns (block
  /// "patterns", d_y x learned_patterns); 0 (the default) = given as Forward()
  /// input.
  Index learned_queries = 0;
  Index learned_patterns = 0;
  ///@}
  /// Seed of the random initialisation (weights ~ N(0, 1/fan_in); default 1).
  unsigned seed = 1;
  /// Forward solver for retrieval mode; nullptr = PicardSolver with
  /// max_iterations 200 and absolute_tolerance 1e-9 (double) / 1e-5 (float).
  std::shared_ptr<const Solver<Scalar>> solver;
  /// The implicit backward pass (retrieval mode; default BackwardOptions).
  BackwardOptions backward;

  /// True when the options are consistent (sizes positive, head_dim dividing
  /// query_dim when 0, matching sizes for disabled projections, beta >= 0,
  /// query_weight in [0, 1), valid backward options); otherwise false, with
  /// the bad field named in *error when error is not nullptr.
  bool IsValid(std::string* error) const {
    auto fail = [error](const std::string& m) {
      if (error) *error = m;
      return false;
    };
    if (query_dim <= 0) return fail("query_dim must be > 0, got " + std::to_string(query_dim));
    if (pattern_dim <= 0) return fail("pattern_dim must be > 0, got " + std::to_string(pattern_dim));
    if (num_heads < 1) return fail("num_heads must be >= 1, got " + std::to_string(num_heads));
    if (head_dim < 0 || value_dim < 0 || output_dim < 0) {
      return fail("head_dim, value_dim and output_dim must be >= 0");
    }
    if (head_dim == 0 && query_dim % num_heads != 0) {
      return fail("head_dim = 0 needs num_heads (" + std::to_string(num_heads) +
                  ") to divide query_dim (" + std::to_string(query_dim) + ")");
    }
    const Index dk = head_dim > 0 ? head_dim : query_dim / num_heads;
    const Index dv = value_dim > 0 ? value_dim : dk;
    const Index dout = output_dim > 0 ? output_dim : query_dim;
    if (!project_queries && num_heads * dk != query_dim)
      return fail("project_queries = false needs num_heads * head_dim == query_dim");
    if (!project_keys && num_heads * dk != pattern_dim)
      return fail("project_keys = false needs num_heads * head_dim == pattern_dim");
    if (!project_values && num_heads * dv != pattern_dim)
      return fail("project_values = false needs num_heads * value_dim == pattern_dim");
    if (!project_output && dout != num_heads * dv)
      return fail("project_output = false needs output_dim == num_heads * value_dim");
    if (!(beta >= 0.0) || !std::isfinite(beta)) return fail("beta must be finite and >= 0");
    if (!(query_weight >= 0.0 && query_weight < 1.0))
      return fail("query_weight must be in [0, 1), got " + std::to_string(query_weight));
    if (learned_queries < 0 || learned_patterns < 0)
      return fail("learned_queries and learned_patterns must be >= 0");
    if (!backward.IsValid(error)) {
      if (error) *error = "backward." + *error;
      return false;
    }
    return true;
  }
};

}  // namespace implicit
