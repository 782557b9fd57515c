// implicit-et's training loop (et/training.h).
#include "et/training.h"

#include "common/format.h"
#include "common/output_files.h"
#include "common/progress.h"
#include "common/ranks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

namespace implicit_apps {
namespace {

// Learning-rate factor at `step` of `steps`: cosine from 1 down to 0.1.
double CosineDecay(long step, long steps) {
  const double frac = static_cast<double>(step) / static_cast<double>(std::max<long>(steps, 1));
  return 0.1 + 0.45 * (1.0 + std::cos(3.141592653589793 * frac));
}

}  // namespace

std::string CheckpointState(const Config& c, const TrainStats& ts, long start_step) {
  if (ts.saved_step >= 0)
    return "the last good checkpoint '" + c.checkpoint + "' (step " + std::to_string(ts.saved_step) + ") is kept";
  if (SameFile(c.checkpoint, c.resume))
    return "checkpoint '" + c.checkpoint + "' (step " + std::to_string(start_step) + ") is kept unchanged";
  return "no checkpoint was written ('" + c.checkpoint + "' is unchanged)";
}
TrainStats Train(const Config& c, const implicit::Communicator& comm, Workers& workers, Optimizers& adam,
                 const Matrix<double>& train, long start_step, const TrainingLosses& resumed) {
  EtModel& model = workers.main();
  Progress progress(!c.quiet && comm.is_root(), 5.0);
  const auto t0 = std::chrono::steady_clock::now();
  TrainStats ts;
  ts.losses = resumed;
  double smooth = -1;
  Vector<double> gm, ge;
  // The last parameters with which a step's loss and gradients were finite,
  // and how many steps they had been trained: what a diverged run keeps.
  Vector<double> good_model = model.params().values(), good_energy = model.energy_params().values();
  long good_step = start_step;
  for (long step = start_step; step < c.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    std::mt19937 gen(static_cast<unsigned>(c.seed) * 7919u + static_cast<unsigned>(step) * 104729u + 1u);
    std::uniform_int_distribution<Index> pick(0, train.cols() - 1);
    Matrix<double> batch(train.rows(), c.batch);
    for (Index b = 0; b < c.batch; ++b) batch.col(b) = train.col(pick(gen));
    const Matrix<double> masks = RandomMasks(c.batch, c.masked, gen);
    adam.Decay(CosineDecay(step, c.steps));
    const StepStats st = workers.Gradients(c, batch, masks, comm, &gm, &ge);
    if (!std::isfinite(st.loss) || !gm.allFinite() || !ge.allFinite()) {
      ts.diverged_at_step = step + 1;
      ts.divergence = "loss " + Fmt(st.loss) + (std::isfinite(st.loss) ? ", gradient not finite" : "");
      // Back to the parameters of the last finite step (those of this step
      // came out of an update that already ran away).
      model.params().values() = good_model;
      model.energy_params().values() = good_energy;
      workers.Sync();
      ts.kept_step = good_step;
      break;
    }
    good_model = model.params().values();
    good_energy = model.energy_params().values();
    good_step = step;
    if (c.checkpoint_every > 0 && step > start_step && step % c.checkpoint_every == 0) {
      OnEveryRank(comm, [&] {  // written by rank 0 only; a failure stops every rank
        if (comm.is_root()) Save(c, step, model, adam, ts.losses);
      });
      ts.saved_step = step;
    }
    adam.model.Step(model.params(), gm);
    adam.energy.Step(model.energy_params(), ge);
    workers.Sync();
    ts.backward_failures += st.backward_failed;
    ts.equilibrium_seconds.push_back(st.equilibrium_seconds);
    ts.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    ts.forward_unconverged += c.batch - st.forward_converged;
    if (ts.losses.first < 0) ts.losses.first = st.loss;
    ts.losses.last = st.loss;
    smooth = smooth < 0 ? st.loss : 0.9 * smooth + 0.1 * st.loss;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = static_cast<double>(step + 1 - start_step) / std::max(elapsed, 1e-9);
    progress.Update(Progress::Bar(static_cast<double>(step + 1) / static_cast<double>(c.steps)) + " step " +
                    std::to_string(step + 1) + "/" + std::to_string(c.steps) + "  loss " + Fmt(smooth, 4) + "  " +
                    FmtFixed(rate, 2) + " steps/s  " + FmtFixed(rate * static_cast<double>(c.batch), 0) +
                    " digits/s  fwd it " + std::to_string(st.forward_iterations) + "  eta " +
                    FmtFixed(static_cast<double>(c.steps - step - 1) / std::max(rate, 1e-9), 0) + " s");
  }
  progress.Done();
  ts.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ts;
}

}  // namespace implicit_apps
