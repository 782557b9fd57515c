// implicit-et's printed and written results (et/output.h).
#include "et/output.h"

#include "common/digit_patches.h"
#include "common/format.h"
#include "common/json_output.h"
#include "common/png.h"
#include "common/table.h"
#include "common/timing.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

void WriteGrid(const std::string& path, const std::vector<Matrix<double>>& rows_patches,
               const Matrix<double>& patch_mask) {
  // rows: original, masked, ET, Hopfield; columns: digits. Each digit 8x8 -> 48x48.
  const int scale = 6, pad = 4, cols = static_cast<int>(patch_mask.cols());
  const int nrows = static_cast<int>(rows_patches.size());
  const int W = cols * (8 * scale + pad) + pad, H = nrows * (8 * scale + pad) + pad;
  std::vector<unsigned char> img(static_cast<std::size_t>(W) * H, 255);
  for (int r = 0; r < nrows; ++r) {
    const Matrix<double> digits = PatchesToDigits(rows_patches[static_cast<std::size_t>(r)]);
    for (int b = 0; b < cols; ++b)
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) {
          const int A = (i / 2) * 4 + j / 2;
          double v = (digits(8 * i + j, b) + 1.0) / 2.0;  // [-1, 1] -> [0, 1]
          v = std::min(1.0, std::max(0.0, v));
          unsigned char px = static_cast<unsigned char>(std::lround(255.0 * (1.0 - v)));
          if (r == 1 && patch_mask(A, b) > 0.5) px = 160;  // masked: gray
          for (int y = 0; y < scale; ++y)
            for (int x = 0; x < scale; ++x) {
              const int X = pad + b * (8 * scale + pad) + j * scale + x;
              const int Y = pad + r * (8 * scale + pad) + i * scale + y;
              img[static_cast<std::size_t>(Y) * W + X] = px;
            }
        }
  }
  WriteGrayPng(path, W, H, img);
}

}  // namespace

void PrintHeader(const Config& c, int ranks, Index n_train, Index parameters, const std::string& device_name) {
  std::cout << "implicit-et: " << n_train << " training digits, " << c.holdout << " held out; " << c.masked
            << " of 16 patches masked; ET " << ConfigKey(c) << ", " << parameters << " parameters; "
            << (ranks > 1 ? std::to_string(ranks) + " MPI ranks x " : "") << c.threads
            << (c.threads == 1 ? " thread; " : " threads; ")
            << (c.unroll ? "backprop through " + std::to_string(c.unroll_steps) + " unrolled gradient steps"
                         : "implicit gradients at the equilibrium (" + c.solver + " forward, " +
                               (c.device == "cuda" ? "Anderson adjoint, both on the GPU " + device_name
                                                   : std::string("GMRES adjoint")) +
                               ")")
            << "\n";
}
void PrintEvaluation(const Config& c, const TrainStats& ts, long start_step, const Evaluation& e) {
  if (start_step >= c.steps && !c.resume.empty()) {
    std::cout << "nothing to do: checkpoint '" << c.resume << "' is at step " << start_step
              << ", at or past --steps " << c.steps << " (the total); trained 0 steps, evaluating it\n";
  } else if (start_step >= c.steps) {
    std::cout << "nothing to do: --steps 0; trained 0 steps, evaluating the initial model\n";
  } else {
    if (ts.diverged_at_step > 0) std::cout << "training diverged at step " << ts.diverged_at_step << "; ";
    if (ts.step_seconds.empty()) {
      std::cout << "trained 0 steps\n";
    } else {
      std::cout << "trained " << ts.step_seconds.size() << " steps in " << FmtFixed(ts.seconds, 1)
                << " s (median step " << Fmt(Median(ts.step_seconds), 3) << " s, "
                << Fmt(Median(ts.equilibrium_seconds), 3)
                << " s of it in the equilibrium solve and IFT backward pass); training loss "
                << Fmt(ts.losses.first, 4) << " -> " << Fmt(ts.losses.last, 4) << "\n";
    }
  }
  if (!c.unroll) std::cout << "held-out forward: " << e.summary.BriefReport() << "\n";
  Table t({"held-out masked MSE", "value", "vs ET"}, {false, true, true});
  t.AddRow({std::string("energy transformer (") + (c.unroll ? "unrolled" : "implicit") + ")", FmtFixed(e.et_mse, 4),
            "1.00x"});
  t.AddRow({"one-step Hopfield (best beta " + Fmt(e.best_beta) + ")", FmtFixed(e.hop_mse, 4),
            FmtFixed(e.hop_mse / e.et_mse, 2) + "x"});
  t.AddRow({"mean fill", FmtFixed(e.mean_mse, 4), FmtFixed(e.mean_mse / e.et_mse, 2) + "x"});
  t.Print(std::cout);
  std::cout << "ET minus one-step Hopfield, per held-out digit: " << Fmt(e.diff_mean, 3) << " +- "
            << Fmt(e.diff_stderr, 2) << " (standard error); ET better on " << e.better << "/" << e.pred.cols()
            << " digits\n";
}
void WriteImage(const Config& c, const Matrix<double>& test, const Evaluation& e) {
  const Index shown = std::min<Index>(12, test.cols());
  auto complete = [&](const Matrix<double>& p) {
    return Matrix<double>(
        (e.pixel_mask.array() * p.array() + (1.0 - e.pixel_mask.array()) * test.array()).matrix().leftCols(shown));
  };
  WriteGrid(c.image, {test.leftCols(shown), test.leftCols(shown), complete(e.pred), complete(e.hop_pred)},
            e.masks.leftCols(shown));
  std::cout << "image: " << c.image
            << " (rows: original, masked patches in gray, energy transformer completion, one-step Hopfield "
               "completion)\n";
}

void WriteJson(const Config& c, const TrainStats& ts, const Evaluation& e, Index n_train, Index parameters) {
  Json o;
  o["mode"] = c.unroll ? "unroll" : "implicit";
  o["steps"] = c.steps;
  o["batch"] = c.batch;
  o["masked_patches"] = c.masked;
  o["train_digits"] = n_train;
  o["heldout_digits"] = c.holdout;
  o["heldout_mse"] = e.et_mse;
  o["mean_fill_mse"] = e.mean_mse;
  o["hopfield_mse"] = e.hop_mse;
  o["hopfield_beta"] = e.best_beta;
  o["hopfield_difference"] = e.diff_mean;
  o["hopfield_difference_stderr"] = e.diff_stderr;
  o["digits_better_than_hopfield"] = e.better;
  o["first_train_loss"] = ts.losses.first;
  o["last_train_loss"] = ts.losses.last;
  o["train_seconds"] = ts.seconds;
  o["device"] = c.device;
  const bool trained = !ts.step_seconds.empty();
  o["median_step_seconds"] = trained ? Json(Median(ts.step_seconds)) : Json(nullptr);
  o["median_equilibrium_seconds"] = trained ? Json(Median(ts.equilibrium_seconds)) : Json(nullptr);
  o["diverged_at_step"] = ts.diverged_at_step > 0 ? Json(ts.diverged_at_step) : Json(nullptr);
  o["divergence"] = ts.diverged_at_step > 0 ? Json(ts.divergence) : Json(nullptr);
  o["kept_step"] = ts.diverged_at_step > 0 ? Json(ts.kept_step) : Json(nullptr);
  o["backward_failures"] = ts.backward_failures;
  o["forward_unconverged"] = ts.forward_unconverged;
  o["heldout_forward_status"] =
      c.unroll ? "unrolled" : implicit::TerminationTypeToString(e.summary.termination_type);
  o["parameters"] = parameters;
  o["checkpoint"] = c.checkpoint;
  o["image"] = c.image;
  WriteJsonFile(c.json, o, "--json");
  std::cout << "json: " << c.json << "\n";
}

}  // namespace implicit_apps
