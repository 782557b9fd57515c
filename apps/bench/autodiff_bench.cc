// implicit-bench --autodiff (autodiff_bench.h): the energies and styles it runs
// (the functors in autodiff_energies.h, their timings in autodiff_measure.h),
// the table and the JSON.
#include "bench/autodiff_bench.h"

#include "bench/autodiff_energies.h"
#include "bench/autodiff_measure.h"
#include "bench/et_shape.h"
#include "common/format.h"
#include "common/table.h"

#include <implicit/core/autodiff_energy.h>
#include <implicit/layers/energy_transformer_energy.h>
#include <implicit/layers/modern_hopfield_energy.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

std::string Ratio(double r) { return r < 0 ? "-" : FmtFixed(r, r < 10 ? 1 : 0); }

}  // namespace

Json RunAutodiffBench(const AutodiffBenchOptions& o) {
  using namespace autodiff;  // the user energies, Measure and MeasureTrainingStep
  std::vector<Row> rows;
  // The et rows' training steps, by style.
  std::optional<TrainingStep> blocks_step, eigen_step, closed_step;
  const auto wanted = [&](const char* energy) {
    return std::find(o.energies.begin(), o.energies.end(), energy) != o.energies.end();
  };
  const auto style = [&](const char* name) {
    return std::find(o.styles.begin(), o.styles.end(), name) != o.styles.end();
  };
  for (long n : o.dimensions) {
    if (!wanted("retrieval") && !wanted("attention")) break;
    if (!o.quiet) std::cerr << "autodiff: n = " << n << "\n";
    const Matrix<double> P = Gaussian(n, o.patterns, 1.0, 7);
    implicit::ModernHopfieldEnergy<double>::Options closed_options;
    closed_options.beta = 2.0;
    const implicit::ModernHopfieldEnergy<double> closed(P, closed_options);
    if (wanted("retrieval")) {
      if (style("blocks")) {
        rows.push_back(Measure("retrieval", "blocks",
                               implicit::AutoDiffEnergy<Retrieval, double>(Retrieval{P, 2.0}, n), &closed, o, 11));
      }
      if (style("eigen")) {
        rows.push_back(Measure("retrieval", "eigen",
                               implicit::AutoDiffEnergy<RetrievalEigen, double>(RetrievalEigen{P, 2.0}, n),
                               &closed, o, 11));
      }
      if (style("loop")) {
        rows.push_back(Measure("retrieval", "loop",
                               implicit::AutoDiffEnergy<RetrievalLoop, double>(RetrievalLoop{P, 2.0}, n),
                               &closed, o, 11));
      }
    }
    const Index width = 16, tokens = std::max<long>(1, n / width);
    const double beta = 1.0;
    const Matrix<double> beta_WK = beta * Gaussian(16, width, 0.25, 21), WQ = Gaussian(16, width, 0.25, 22),
                         Xi = Gaussian(width, 32, 0.25, 23);
    if (wanted("attention") && style("blocks")) {
      rows.push_back(Measure("attention", "blocks",
                             implicit::AutoDiffEnergy<Attention, double>(
                                 Attention{tokens, width, beta_WK, WQ, Xi, beta}, tokens * width),
                             nullptr, o, 31));
    }
    if (wanted("attention") && style("eigen")) {
      rows.push_back(Measure("attention", "eigen",
                             implicit::AutoDiffEnergy<AttentionEigen, double>(
                                 AttentionEigen{tokens, width, beta_WK, WQ, Xi, beta}, tokens * width),
                             nullptr, o, 31));
    }
  }
  if (wanted("et")) {  // the Energy Transformer at implicit-et's sizes, against its closed form
    if (!o.quiet) std::cerr << "autodiff: et\n";
    const implicit::EnergyTransformer<double>::Options eo = ImplicitEtShape();
    implicit::EnergyTransformer<double> closed(eo);
    const Index n = eo.num_tokens * eo.token_dim;
    // A whole training step of each, on the same batch (the same iterates).
    const Matrix<double> z0 = Gaussian(n, o.samples, 1.0 / std::sqrt(static_cast<double>(n)), 51);
    const Matrix<double> target = Gaussian(n, o.samples, 1.0 / std::sqrt(static_cast<double>(n)), 52);
    const auto measure = [&](const char* name, auto functor, std::optional<TrainingStep>* step) {
      using Functor = decltype(functor);
      implicit::AutoDiffEnergy<Functor, double> user(functor, n, *closed.parameters());
      rows.push_back(Measure("et", name, user, &closed, o, 41));
      user.set_mode(implicit::AutoDiffMode::kReverse);
      *step = MeasureTrainingStep(user, z0, target, o.repeat);
    };
    if (style("blocks")) {
      measure("blocks",
              UserEnergyTransformer{eo.num_tokens, eo.token_dim, eo.num_heads, eo.head_dim, eo.num_memories,
                                    closed.beta(), eo.eps},
              &blocks_step);
    }
    if (style("eigen")) {
      measure("eigen",
              EigenEnergyTransformer{eo.num_tokens, eo.token_dim, eo.num_heads, eo.head_dim, eo.num_memories,
                                     closed.beta(), eo.eps},
              &eigen_step);
    }
    closed_step = MeasureTrainingStep(closed, z0, target, o.repeat);
  }

  std::cout << "User energies (AutoDiffEnergy): time per sample as a multiple of the value's\n"
            << "(style: how the functor is written -- blocks: ad::Dot, ad::LogSumExp, ad::Product; eigen: Eigen "
            << "expressions; loop: scalar loops; closed form: the library's layer; hvp kept: a product of "
            << "the Hessian recorded once at x, LinearizeHessian; * forward mode timed on one sample, once)\n";
  Table table({"energy", "style", "n", "value us", "grad fwd", "grad rev", "grad closed", "hvp fwd", "hvp rev",
               "hvp kept", "hvp closed", "vjp rev", "vjp closed"},
              {false, false, true, true, true, true, true, true, true, true, true, true, true});
  for (const Row& r : rows) {
    const std::string star = r.forward_one_sample ? "*" : "";
    table.AddRow({r.energy, r.style, std::to_string(r.n), FmtFixed(r.value * 1e6, 1),
                  Ratio(r.gradient_forward) + star, Ratio(r.gradient_reverse), Ratio(r.gradient_closed),
                  Ratio(r.hvp_forward) + star, Ratio(r.hvp_reverse), Ratio(r.hvp_kept), Ratio(r.hvp_closed),
                  Ratio(r.vjp_reverse), Ratio(r.vjp_closed)});
  }
  table.Print(std::cout);
  const auto print_step = [&](const char* style, const std::optional<TrainingStep>& step) {
    if (!step || !closed_step) return;
    std::cout << "et training step of fixed work (30 Picard iterations on z - 0.1 grad E, 100 GMRES iterations "
              << "of the IFT backward), per sample: user energy (" << style << ") "
              << FmtFixed(step->seconds * 1e3, 2) << " ms (" << step->forward_iterations << " + "
              << step->backward_iterations << " iterations), closed form " << FmtFixed(closed_step->seconds * 1e3, 2)
              << " ms (" << closed_step->forward_iterations << " + " << closed_step->backward_iterations
              << "): " << Ratio(step->seconds / closed_step->seconds) << "x\n";
  };
  print_step("blocks", blocks_step);
  print_step("eigen", eigen_step);
  Json root;
  root["settings"] = {{"patterns", o.patterns}, {"styles", o.styles}, {"samples", o.samples}, {"repeat", o.repeat},
                      {"forward_budget", o.forward_budget}, {"reverse_mode", implicit::kHaveReverseMode}};
  root["results"] = Json::array();
  auto ratio = [](double r) { return r < 0 ? Json(nullptr) : Json(r); };
  for (const Row& r : rows) {
    root["results"].push_back({{"energy", r.energy}, {"style", r.style}, {"n", r.n}, {"value_seconds", r.value},
                               {"gradient_forward", ratio(r.gradient_forward)},
                               {"gradient_reverse", ratio(r.gradient_reverse)},
                               {"gradient_closed_form", ratio(r.gradient_closed)},
                               {"hvp_forward", ratio(r.hvp_forward)},
                               {"hvp_reverse", ratio(r.hvp_reverse)},
                               {"hvp_kept_reverse", ratio(r.hvp_kept)},
                               {"hvp_closed_form", ratio(r.hvp_closed)},
                               {"parameter_vjp_reverse", ratio(r.vjp_reverse)},
                               {"parameter_vjp_closed_form", ratio(r.vjp_closed)},
                               {"forward_one_sample", r.forward_one_sample}});
  }
  if (closed_step && (blocks_step || eigen_step)) {
    const auto step = [](const TrainingStep& t) {
      return Json{{"seconds", t.seconds}, {"forward_iterations", t.forward_iterations},
                  {"backward_iterations", t.backward_iterations}};
    };
    Json training = {{"closed_form", step(*closed_step)}};
    if (blocks_step) {  // the user energy written with the blocks
      training["user_energy"] = step(*blocks_step);
      training["ratio"] = blocks_step->seconds / closed_step->seconds;
    }
    if (eigen_step) {  // and in Eigen expressions
      training["eigen_energy"] = step(*eigen_step);
      training["eigen_ratio"] = eigen_step->seconds / closed_step->seconds;
    }
    root["et_training_step"] = training;
  }
  return root;
}

}  // namespace implicit_apps
