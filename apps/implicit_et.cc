// implicit-et: trains an Energy Transformer on masked digit completion,
// through its equilibrium (implicit differentiation) or by unrolling.
//
// Model. An 8x8 digit (x/8 - 1) is cut into 16 patches of 2x2 pixels. Token 0
// is a learned class token, tokens 1..16 the patches: a visible patch p at
// position A gives the token E_A p + e + P_A (learned per-position embedding
// E_A, bias e, position embedding P_A); a masked patch starts at a learned mask
// token m + P_A. Visible tokens and the class token are clamped; of a masked
// token the first D - pos_dim coordinates are free and the last pos_dim stay at
// m + P_A, so it keeps its position. The free coordinates move to an
// equilibrium of the Energy Transformer energy (EnergyTransformer, softmax
// memory), found by a forward solver on the ET dynamics z <- z - a dE/dg
// (EnergyTransformerMap). Each patch is decoded by LayerNorm + a per-position
// linear map; the loss is the MSE on the masked pixels. Adam, learning rate
// with a cosine decay to 10%; the energy's own parameters get a smaller rate
// (--energy-lr).
//
// Each batch is shared out over --threads copies of the model (Workers): the
// samples are independent, so the combined gradient is exactly the batch's.
// While the shares run, Eigen's own (OpenMP) threads are off, so that the
// cores are not oversubscribed. Under `mpirun -np K` (a build with MPI) each
// rank takes a shard of every batch first and the ranks sum their gradients
// (data parallel; the global batch stays --batch); every rank then takes the
// same Adam step, and only rank 0 prints and writes the checkpoint, image and
// JSON. A checkpoint resumes with any number of ranks. The held-out digits are
// predicted the same way: each rank its shard, over its threads, then gathered.
//
// Gradients: --mode implicit (default) uses implicit::ImplicitBackward at the
// equilibrium (adjoint (I - J)^T u = dL/dz of the dynamics map, GMRES): memory
// independent of the forward iterations. --mode unroll instead runs
// --unroll-steps steps of the same dynamics and backpropagates through all of
// them (the model is then that truncated dynamics, also at test time).
//
// --device cuda (a CUDA build and a GPU) runs the equilibrium solve and the
// IFT backward pass of the whole batch on the GPU (et/device_equilibrium.h:
// device picard or anderson forward, device Anderson adjoint); the embeddings,
// the decoder, the loss and Adam stay on the CPU, one process, one thread.
//
//   implicit-et                                 # default run, a few minutes on 2 cores
//   implicit-et --steps 50 --json et.json --image et.png
//   implicit-et --resume implicit-et.ckpt --steps 400
//   mpirun -np 2 implicit-et --steps 50            # the same run over two processes
//   implicit-et --device cuda --batch 1024 --solver anderson   # solves on the GPU
//
// The parts are in et/: config (the command line), model (EtModel, masks, one
// model's gradients), workers (threads and ranks), optimizers, checkpointing,
// training, gradient_check, evaluation and output; this file runs them (Run).
#include "common/app_main.h"
#include "common/data_paths.h"
#include "common/digit_patches.h"
#include "common/format.h"
#include "common/output_files.h"
#include "common/ranks.h"
#include "et/checkpointing.h"
#include "et/config.h"
#include "et/evaluation.h"
#include "et/gradient_check.h"
#include "et/model.h"
#include "et/optimizers.h"
#include "et/output.h"
#include "et/training.h"
#include "et/workers.h"

#include <implicit/core/checkpoint.h>
#include <implicit/core/digits.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>

namespace implicit_apps {
namespace {

int Run(int argc, char** argv) {
  const implicit::Communicator& comm = AppCommunicator();
  Config c;
  if (!ParseConfig(argc, argv, &c)) return 0;
  // Under mpirun the ranks share the machine's cores unless --threads says otherwise.
  if (!c.threads_given) c.threads = std::max(1L, c.threads / comm.size());
  Require(c.device == "cpu" || comm.size() == 1, "--device cuda: runs in one process, not over MPI ranks");
  if (c.check_gradients == 0 && comm.is_root()) {
    // Temporary files of writers killed while saving this checkpoint.
    for (const std::string& f : implicit::RemoveStaleCheckpointTemporaries(c.checkpoint))
      if (!c.quiet) std::cerr << "implicit-et: removed '" << f << "', left by a checkpoint writer that was killed\n";
  }
  const implicit::DigitsDataset digits = LoadDigitsOption(c.data);
  Require(c.holdout < digits.size(), "--holdout: must be in 1.." + std::to_string(digits.size() - 1) + ", got " +
                                         std::to_string(c.holdout));
  const Matrix<double> all = DigitPatches(digits.Scaled());
  const Index n_train = digits.size() - c.holdout;
  const Matrix<double> train = all.leftCols(n_train), test = all.rightCols(c.holdout);
  c.data_key = DataKey(train);

  Workers workers(c, c.threads);
  EtModel& model = workers.main();
  Optimizers adam(c);
  TrainingLosses resumed;
  const long start_step = c.resume.empty() ? 0 : Resume(c, workers, adam, &resumed);
  if (c.check_gradients > 0) return CheckGradients(c, model, train);
  const Index parameters = model.params().size() + model.energy_params().size();
  PrintHeader(c, comm.size(), n_train, parameters, model.device_name());
  const TrainStats ts = Train(c, comm, workers, adam, train, start_step, resumed);
  const Evaluation e = Evaluate(c, workers, comm, train, test);
  if (!std::isfinite(e.et_mse))
    throw std::runtime_error("the held-out masked MSE of the trained model is not finite (" + Fmt(e.et_mse) +
                             "): " + CheckpointState(c, ts, start_step) + "; --json and --image not written");
  PrintEvaluation(c, ts, start_step, e);
  const bool diverged = ts.diverged_at_step > 0;
  if (diverged && comm.is_root()) {
    std::cerr << "implicit-et: training diverged at step " << ts.diverged_at_step << " (" << ts.divergence
              << "); lower --lr or --energy-lr: evaluated with the parameters after step " << ts.kept_step
              << " (the last with a finite loss); " << CheckpointState(c, ts, start_step) << "\n";
  }
  // Every output asked for is written (by rank 0), or the run fails naming
  // each one that was not. The final checkpoint only when this run trained
  // to the end (a resumed checkpoint at or past --steps stays as it is, and
  // a diverged run keeps the last good one).
  if (!comm.is_root()) return diverged ? kDivergedExitStatus : 0;
  Outputs outputs;
  if (diverged) {
    std::cout << "checkpoint: " << c.checkpoint << " not written (training diverged)\n";
  } else if (start_step < c.steps) {
    outputs.Write("--checkpoint", c.checkpoint, [&] {
      Save(c, c.steps, model, adam, ts.losses);
      std::cout << "checkpoint: " << c.checkpoint << " (step " << c.steps << ")\n";
    });
  } else {
    std::cout << "checkpoint: " << c.checkpoint << " not written (nothing trained)\n";
  }
  outputs.Write("--image", c.image, [&] { WriteImage(c, test, e); });
  outputs.Write("--json", c.json, [&] { WriteJson(c, ts, e, n_train, parameters); });
  outputs.Finish();
  return diverged ? kDivergedExitStatus : 0;
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-et", [&] { return implicit_apps::Run(argc, argv); });
}
