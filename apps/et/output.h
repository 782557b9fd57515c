// What implicit-et prints and writes: the header line, the training summary
// and the held-out table, the PNG grid of completions (--image) and the JSON
// of the results (--json).
#pragma once

#include "et/config.h"
#include "et/evaluation.h"
#include "et/training.h"

#include <string>

namespace implicit_apps {

// The first line of a run: data, masks, model, ranks and threads, how the
// gradients are computed.
void PrintHeader(const Config& c, int ranks, Index n_train, Index parameters, const std::string& device_name);

// What was trained (or why nothing), the held-out forward solves, the table
// of held-out masked MSEs and the paired ET - Hopfield difference.
void PrintEvaluation(const Config& c, const TrainStats& ts, long start_step, const Evaluation& e);

// The PNG grid of the first 12 held-out digits: original, masked, ET and
// Hopfield completions (visible pixels as given, masked pixels predicted).
void WriteImage(const Config& c, const Matrix<double>& test, const Evaluation& e);

// --json: the settings, training figures and held-out results.
void WriteJson(const Config& c, const TrainStats& ts, const Evaluation& e, Index n_train, Index parameters);

}  // namespace implicit_apps
