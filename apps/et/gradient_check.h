// implicit-et --check-gradients: the gradients of one training step against
// central finite differences of the loss, on a few training digits.
#pragma once

#include "et/config.h"
#include "et/model.h"

namespace implicit_apps {

// --check-gradients on a few training digits, with tight solves.
int CheckGradients(const Config& c, EtModel& model, const Matrix<double>& train);

}  // namespace implicit_apps
