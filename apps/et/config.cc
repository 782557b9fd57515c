// implicit-et's command line (et/config.h): the options, their checks, the
// --help text, and the model size each --threads copy may take.
#include "et/config.h"

#include "common/cli.h"
#include "common/format.h"
#include "common/output_files.h"
#include "common/solvers.h"

#include <string>

namespace implicit_apps {
namespace {

const char* kDescription = R"(Trains an Energy Transformer on masked digit completion (16 patch tokens + a class
token; random patches masked; MSE on masked pixels) and compares the held-out masked
MSE with mean fill and one-step Hopfield completion on the same masks.)";

// UsageError when the model's copies (one per --threads) and its gradient and
// Adam state would take more than 2 GB, naming the option that weighs most.
void CheckModelSize(const Config& c) {
  const double D = static_cast<double>(c.dim), attention = 2.0 * static_cast<double>(c.heads * c.head_dim) * D,
               memories = static_cast<double>(c.memories) * D;
  const double parameters = attention + memories + D * (kPatchSize * kPatches + 1 + kTokens + 4) +
                            kPatches * kPatchSize * (D + 1);
  const double bytes = 8.0 * parameters * static_cast<double>(c.threads + 4);
  if (bytes <= 2e9) return;
  const std::string option = memories >= attention ? "--memories" : "--heads";
  throw UsageError(option + ": " + Fmt(parameters, 3) + " parameters in " + std::to_string(c.threads) +
                   " copies (--threads) would take " + Fmt(bytes * 1e-9, 3) + " GB (at most 2 GB)");
}

}  // namespace

std::string ConfigKey(const Config& c) {
  return "dim=" + std::to_string(c.dim) + " heads=" + std::to_string(c.heads) + " head_dim=" +
         std::to_string(c.head_dim) + " memories=" + std::to_string(c.memories) + " pos_dim=" + std::to_string(c.pos_dim) + " mode=" +
         (c.unroll ? "unroll" : "implicit");
}

// The command line into `c`; false when it asked for --help.
bool ParseConfig(int argc, char** argv, Config* c) {
  CLI::App app(kDescription, "implicit-et");
  ConfigureApp(app);
  app.add_option("--steps", c->steps, "training steps (Adam updates) in total")->check(IntIn(0, 1000000));
  app.add_option("--batch", c->batch, "training digits per step")->check(IntIn(1, 4096));
  app.add_option("--lr", c->lr, "Adam learning rate of embeddings and decoder")->check(Positive());
  app.add_option("--energy-lr", c->energy_lr,
                 "Adam learning rate of the energy's parameters; both decay by a\n"
                 "cosine schedule to 10% over --steps")
      ->check(Positive());
  app.add_option("--masked", c->masked, "patches masked per digit")->check(IntIn(1, kPatches - 1));
  std::string mode = "implicit";
  CLI::Option* mode_option =
      app.add_option("--mode", mode, "implicit (gradients at the equilibrium) or unroll")
          ->check(CLI::IsMember({"implicit", "unroll"}));
  CLI::Option* unroll_flag = app.add_flag("--unroll", "same as --mode unroll");
  app.add_option("--unroll-steps", c->unroll_steps, "steps of the dynamics unrolled in --mode unroll")
      ->check(IntIn(1, 10000));
  app.add_option("--dim", c->dim, "token dimension")->check(IntIn(2, 512));
  app.add_option("--heads", c->heads, "attention heads")->check(IntIn(0, 64));
  app.add_option("--head-dim", c->head_dim, "dimension of each head")->check(IntIn(1, 512));
  app.add_option("--memories", c->memories, "Hopfield memories of the energy")->check(IntIn(0, 100000));
  app.add_option("--pos-dim", c->pos_dim, "coordinates of a masked token kept at its position code (< --dim)")
      ->check(IntIn(0, 511));
  app.add_option("--step", c->step, "step A of the ET dynamics z <- z - A dE/dg")
      ->check(RealCheck([](double a) { return a > 0 && a <= 1; }, "in (0, 1]"));
  CLI::Option* solver_option =
      app.add_option("--solver", c->solver, "forward solver on the ET dynamics (default anderson with --device cuda)")
          ->check(SolverNameCheck());
  app.add_option("--device", c->device,
                 "cpu, or cuda: the equilibrium solves and IFT backward passes on the GPU\n"
                 "(a CUDA build; --solver picard or anderson; one process, one thread)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--tol", c->tol, "forward tolerance |f(z) - z|")->check(Positive());
  app.add_option("--max-iter", c->max_iter, "forward iteration budget")->check(IntIn(1, 1000000));
  app.add_option("--holdout", c->holdout, "held-out digits, the last N of the file")->check(IntIn(1, 1000000));
  app.add_option("--seed", c->seed, "initialisation, batches and masks")->check(IntIn(0, 4294967295L));
  app.add_option("--checkpoint", c->checkpoint, "where checkpoints go")->check(PathCheck());
  app.add_option("--checkpoint-every", c->checkpoint_every, "save every N steps (0 = only at the end)")
      ->check(IntIn(0, 1000000000));
  app.add_option("--resume", c->resume,
                 "continue from a checkpoint (same model options and data); one at or\n"
                 "past --steps (the total) leaves nothing to train")
      ->check(PathCheck());
  app.add_option("--image", c->image, "PNG grid original / masked / ET / Hopfield")->check(ExtensionCheck({".png"}));
  app.add_option("--json", c->json, "write the results as JSON")->check(PathCheck());
  app.add_option("--data", c->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  app.add_option("--check-gradients", c->check_gradients,
                 "compare N gradient entries with central finite differences of the\n"
                 "loss on one batch, print the errors and exit")
      ->check(IntIn(0, 10000));
  CLI::Option* threads_option =
      app.add_option("--threads", c->threads,
                     "threads that share each batch (default: the number of cores, divided\n"
                     "among the ranks under mpirun); results agree to rounding whatever the number")
          ->check(IntIn(1, 64));
  app.add_flag("--quiet", c->quiet, "no progress bar");
  if (!Parse(app, argc, argv)) return false;
  c->threads_given = threads_option->count() > 0;
  Require(!(unroll_flag->count() > 0 && mode_option->count() > 0 && mode == "implicit"),
          "--unroll: contradicts --mode implicit");
  c->unroll = unroll_flag->count() > 0 || mode == "unroll";
  if (c->device == "cuda") {
    Require(!c->unroll, "--device cuda: --mode unroll is not on the device (only implicit gradients)");
    Require(!c->threads_given || c->threads == 1, "--threads: --device cuda trains in one thread");
    c->threads = 1;
    if (solver_option->count() == 0) c->solver = "anderson";
    Require(c->solver == "picard" || c->solver == "anderson",
            "--solver: the device solvers (--device cuda) are picard and anderson, got " + c->solver);
  }
  Require(c->pos_dim < c->dim, "--pos-dim: must be in 0..dim-1, got " + std::to_string(c->pos_dim));
  CheckModelSize(*c);
  if (c->check_gradients > 0) return true;  // writes no file
  CheckWritable(c->checkpoint, "--checkpoint", true);
  CheckWritable(c->image, "--image");
  CheckWritable(c->json, "--json");
  CheckDistinctFiles({{"--checkpoint", c->checkpoint}, {"--image", c->image}, {"--json", c->json}},
                     {{"--data", c->data}});
  CheckDistinctFiles({{"--image", c->image}, {"--json", c->json}}, {{"--resume", c->resume}});
  return true;
}

}  // namespace implicit_apps
