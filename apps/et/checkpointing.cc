// implicit-et's checkpoints (et/checkpointing.h): Resume and Save, the
// metadata a resumed checkpoint must match, and the training losses stored
// exactly in it.
#include "et/checkpointing.h"

#include <implicit/core/checkpoint.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace implicit_apps {
namespace {

// The first "key=value" of `a` that differs in `b`, as "key=A there, key=B here".
std::string FirstDifference(const std::string& there, const std::string& here) {
  std::istringstream a(there), b(here);
  std::string x, y;
  while (a >> x) {
    if (!(b >> y)) return x + " there, nothing here";
    if (x != y) return x + " there, " + y + " here";
  }
  return b >> y ? "nothing there, " + y + " here" : "";
}

// A checkpoint's metadata `key` against this run's `value`: throws naming
// the difference. `required`: a checkpoint without it is another program's.
void RequireSame(const implicit::Checkpoint& ck, const std::string& key, const std::string& value, bool required,
                 const std::string& path) {
  const auto it = ck.metadata.find(key);
  if (it == ck.metadata.end()) {
    if (required)
      throw std::runtime_error("--resume: checkpoint '" + path + "' was written by another program (no " + key +
                               "), this run uses " + value);
    return;  // written before the key was recorded
  }
  if (it->second != value)
    throw std::runtime_error("--resume: checkpoint '" + path + "' was written for a different " + key + ": " +
                             FirstDifference(it->second, value) + " (checkpoint: " + it->second +
                             "; this run: " + value + ")");
}
void StoreLosses(const TrainingLosses& losses, implicit::Checkpoint* ck) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", losses.first);
  ck->metadata["first_train_loss"] = text;
  std::snprintf(text, sizeof text, "%a", losses.last);
  ck->metadata["last_train_loss"] = text;
}
TrainingLosses RestoreLosses(const implicit::Checkpoint& ck) {
  TrainingLosses losses;
  const auto first = ck.metadata.find("first_train_loss"), last = ck.metadata.find("last_train_loss");
  if (first != ck.metadata.end()) losses.first = std::strtod(first->second.c_str(), nullptr);
  if (last != ck.metadata.end()) losses.last = std::strtod(last->second.c_str(), nullptr);
  return losses;
}

}  // namespace

long Resume(const Config& c, Workers& workers, Optimizers& adam, TrainingLosses* losses) {
  EtModel& model = workers.main();
  implicit::Checkpoint ck;
  try {
    ck = implicit::LoadCheckpoint(c.resume);
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + std::string(e.what()));
  }
  RequireSame(ck, "config", ConfigKey(c), true, c.resume);
  RequireSame(ck, "precision", "double", false, c.resume);
  RequireSame(ck, "data", c.data_key, false, c.resume);
  if (ck.step < 0 || ck.step > 1000000)
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "' has an invalid step " + std::to_string(ck.step));
  try {
    ck.RestoreParameters("model", &model.params());
    ck.RestoreParameters("energy", &model.energy_params());
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "': " + e.what());
  }
  if (!model.params().values().allFinite() || !model.energy_params().values().allFinite())
    throw std::runtime_error("--resume: checkpoint '" + c.resume +
                             "' holds parameters that are not finite (inf or nan); resume from an earlier one");
  try {
    adam.model.SetState(ck.Optimizer("adam_model"), model.params().size());
    adam.energy.SetState(ck.Optimizer("adam_energy"), model.energy_params().size());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("--resume: checkpoint '" + c.resume + "': optimiser state does not fit: " + e.what());
  }
  workers.Sync();
  *losses = RestoreLosses(ck);
  if (!c.quiet) std::cerr << "resumed from " << c.resume << " at step " << ck.step << "\n";
  return static_cast<long>(ck.step);
}
void Save(const Config& c, long step, EtModel& model, const Optimizers& adam, const TrainingLosses& losses) {
  if (!model.params().values().allFinite() || !model.energy_params().values().allFinite())
    throw std::runtime_error("--checkpoint: not writing '" + c.checkpoint + "' at step " + std::to_string(step) +
                             ": the parameters are not finite");
  implicit::Checkpoint ck;
  ck.step = step;
  ck.metadata["program"] = "implicit-et";
  ck.metadata["config"] = ConfigKey(c);
  ck.metadata["precision"] = "double";
  ck.metadata["data"] = c.data_key;
  ck.AddParameters("model", model.params());
  ck.AddParameters("energy", model.energy_params());
  ck.AddOptimizer("adam_model", adam.model.state());
  ck.AddOptimizer("adam_energy", adam.energy.state());
  StoreLosses(losses, &ck);
  try {
    implicit::SaveCheckpoint(c.checkpoint, ck);
  } catch (const std::exception& e) {
    throw std::runtime_error("--checkpoint: " + std::string(e.what()));
  }
}
std::string DataKey(const Matrix<double>& train) {
  std::uint64_t h = 14695981039346656037ULL;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(train.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(train.size()) * sizeof(double); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(train.cols()) + " training digits, fnv1a " + hex;
}

}  // namespace implicit_apps
