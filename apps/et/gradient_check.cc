// implicit-et --check-gradients (et/gradient_check.h): a table of gradient
// entries, every parameter block in turn, against central differences.
#include "et/gradient_check.h"

#include "common/format.h"
#include "common/table.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

// --check-gradients: `count` gradient entries, every parameter block in turn
// (model blocks, then the energy's), a random entry of it each time, against
// central differences of `loss`. Prints a table; returns the largest error.
double CompareWithFiniteDifferences(EtModel& model, long count, const Vector<double>& gm, const Vector<double>& ge,
                                    const std::function<double()>& loss, std::mt19937& gen) {
  struct Block {
    bool energy;
    implicit::ParameterSet<double>::Entry entry;
  };
  std::vector<Block> blocks;
  for (const auto& e : model.params().entries()) blocks.push_back({false, e});
  for (const auto& e : model.energy_params().entries()) blocks.push_back({true, e});
  Table t({"parameter", "index", "gradient", "finite difference", "abs error"}, {false, true, true, true, true});
  double worst = 0;
  for (long k = 0; k < count; ++k) {
    const Block& blk = blocks[static_cast<std::size_t>(k) % blocks.size()];
    Vector<double>& values = blk.energy ? model.energy_params().values() : model.params().values();
    const Vector<double>& grad = blk.energy ? ge : gm;
    std::uniform_int_distribution<Index> idx(0, blk.entry.size() - 1);
    const Index i = blk.entry.offset + idx(gen);
    const double h = 1e-5, v = values(i);
    values(i) = v + h;
    const double lp = loss();
    values(i) = v - h;
    const double lm = loss();
    values(i) = v;
    const double fd = (lp - lm) / (2 * h);
    worst = std::max(worst, std::abs(fd - grad(i)));
    t.AddRow({blk.entry.name, std::to_string(i - blk.entry.offset), Fmt(grad(i), 6), Fmt(fd, 6),
              Fmt(std::abs(fd - grad(i)), 2)});
  }
  t.Print(std::cout);
  return worst;
}

}  // namespace

int CheckGradients(const Config& c, EtModel& model, const Matrix<double>& train) {
  std::mt19937 gen(static_cast<unsigned>(c.seed) + 99u);
  const Index B = std::min<long>(c.batch, 8);
  const Matrix<double> batch = train.leftCols(B);
  const Matrix<double> masks = RandomMasks(B, c.masked, gen);
  Config tight = c;
  tight.tol = 1e-11;
  tight.max_iter = 5000;
  tight.solver = "picard";  // the ET dynamics themselves: reaches 1e-11 reliably
  tight.backward_tol = 1e-10;
  Vector<double> gm, ge;
  const StepStats st = Gradients(model, tight, batch, masks, &gm, &ge);
  std::cout << "gradient check on " << B << " digits: forward converged " << st.forward_converged << "/" << B
            << " (" << st.forward_iterations << " iterations), backward failed " << st.backward_failed << " ("
            << st.backward_products << " products)\n";
  auto loss = [&]() {
    implicit::Summary s;
    return MaskedMse(Predict(model, tight, batch, masks, &s), batch, PixelMask(masks));
  };
  const double worst = CompareWithFiniteDifferences(model, c.check_gradients, gm, ge, loss, gen);
  std::cout << "largest abs error " << Fmt(worst, 3) << "\n";
  return 0;
}

}  // namespace implicit_apps
