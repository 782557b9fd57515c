// sparse-hopfield: Hopfield-Fenchel-Young retrieval of the digits with the
// entmax update xi <- X entmax_alpha(beta X^T xi).
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/core/energy_maps.h>
#include <implicit/layers/regularized_attention.h>

#include <string>

namespace implicit_apps {
namespace {

template <typename S>
class SparseHopfieldProblemT : public ProblemT<S> {
 public:
  SparseHopfieldProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), X_(data_.patterns.template cast<S>()),
        energy_(X_, Options(s)), map_(energy_) {
    this->initial_ = data_.queries.template cast<S>();
    beta_ = s.beta;
    alpha_ = s.Parameter("alpha");
  }
  std::string name() const override { return "sparse-hopfield"; }
  std::string description() const override {
    return "Hopfield-Fenchel-Young retrieval xi <- X entmax_" + Fmt(alpha_) + "(beta X^T xi), " +
           std::to_string(data_.patterns.cols()) + " digits, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(X_, this->initial_, "X",
                                "the two dense GEMMs of one step xi <- X entmax(beta X^T xi) on all B "
                                "queries; the entmax threshold search over N scores per query is extra "
                                "(and usually dominates)",
                                repeats);
  }

 private:
  static implicit::SparseHopfieldOptions Options(const ProblemSettings& s) {
    implicit::SparseHopfieldOptions o;
    o.alpha = s.Parameter("alpha");
    o.beta = s.beta;
    return o;
  }
  DigitPatterns data_;
  Matrix<S> X_;
  implicit::SparseHopfieldEnergy<S> energy_;
  implicit::CccpMap<S> map_;
  double beta_ = 1, alpha_ = 1.5;
};

const bool kRegistered = RegisterProblem<SparseHopfieldProblemT>([] {
  ProblemInfo p;
  p.name = "sparse-hopfield";
  p.order = 20;
  p.summary = "the same with the entmax (sparse) update";
  p.floor = "X^T Z + X P, as hopfield-digits";
  p.parameters = {{"alpha", 1.5, "entmax order of sparse-hopfield", ">= 1", [](double a) { return a >= 1; }}};
  return p;
}());

}  // namespace
}  // namespace implicit_apps
