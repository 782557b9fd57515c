// hopfield-digits: modern Hopfield retrieval of the first N digits (x/8 - 1)
// from queries with pixels 32..63 zeroed; CCCP map xi <- X softmax(beta X^T xi).
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/core/energy_maps.h>
#include <implicit/layers/hopfield.h>

#include <string>

namespace implicit_apps {
namespace {

template <typename S>
class HopfieldDigitsProblemT : public ProblemT<S> {
 public:
  HopfieldDigitsProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : data_(MakeDigitPatterns(digits, s.patterns)), X_(data_.patterns.template cast<S>()),
        energy_(X_, Options(s.beta)), map_(energy_) {
    this->initial_ = data_.queries.template cast<S>();
    beta_ = s.beta;
  }
  std::string name() const override { return "hopfield-digits"; }
  std::string description() const override {
    return "modern Hopfield retrieval, " + std::to_string(data_.patterns.cols()) +
           " digits stored, bottom half of each query zeroed, beta " + Fmt(beta_);
  }
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(X_, this->initial_, "X",
                                "the two GEMMs of one CCCP step xi <- X softmax(beta X^T xi) on all B "
                                "queries; the softmax (N x B exps) and the solver's vector work are extra",
                                repeats);
  }

 private:
  static typename implicit::ModernHopfieldEnergy<S>::Options Options(double beta) {
    typename implicit::ModernHopfieldEnergy<S>::Options o;
    o.beta = beta;
    o.learn_beta = false;
    return o;
  }
  DigitPatterns data_;
  Matrix<S> X_;
  implicit::ModernHopfieldEnergy<S> energy_;
  implicit::CccpMap<S> map_;
  double beta_ = 1;
};

const bool kRegistered = RegisterProblem<HopfieldDigitsProblemT>([] {
  ProblemInfo p;
  p.name = "hopfield-digits";
  p.order = 10;
  p.summary = "modern Hopfield retrieval of digits (bottom half hidden)";
  p.floor = "X^T Z + X P";
  return p;
}());

}  // namespace
}  // namespace implicit_apps
