// hopfield-digits: modern Hopfield retrieval of the first N digits (x/8 - 1)
// from queries with pixels 32..63 zeroed; CCCP map xi <- X softmax(beta X^T xi).
#include "problems/digits_cccp.h"
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/layers/hopfield.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_hopfield.h>
#endif

#include <string>

namespace implicit_apps {
namespace {

template <typename S>
using HopfieldDigitsBase = DigitsCccpProblemT<S, implicit::ModernHopfieldEnergy<S>>;

template <typename S>
class HopfieldDigitsProblemT : public HopfieldDigitsBase<S> {
 public:
  HopfieldDigitsProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : HopfieldDigitsBase<S>(digits, s.patterns, 1.0, "X",
                              "the two GEMMs of one CCCP step xi <- X softmax(beta X^T xi) on all B queries, in the "
                              "column blocks the energy uses; the softmax (N x B exps) and the solver's vector work "
                              "are extra",
                              Options(s.beta)),
        beta_(s.beta) {}
  std::string name() const override { return "hopfield-digits"; }
#ifdef IMPLICIT_WITH_CUDA
  std::unique_ptr<implicit::cuda::DeviceMap<S>> MakeDeviceMap(implicit::cuda::Context& context) const override {
    return std::make_unique<implicit::cuda::HopfieldCccpMap<S>>(context, this->weights(), static_cast<S>(beta_));
  }
#endif
  std::string description() const override {
    return "modern Hopfield retrieval, " + std::to_string(this->stored()) +
           " digits stored, bottom half of each query zeroed, beta " + Fmt(beta_);
  }

 private:
  static typename implicit::ModernHopfieldEnergy<S>::Options Options(double beta) {
    typename implicit::ModernHopfieldEnergy<S>::Options o;
    o.beta = beta;
    o.learn_beta = false;
    return o;
  }
  double beta_;
};

const bool kHopfieldDigitsRegistered = RegisterProblem<HopfieldDigitsProblemT>([] {
  ProblemInfo p;
  p.name = "hopfield-digits";
  p.order = 10;
  p.summary = "modern Hopfield retrieval of digits (bottom half hidden)";
  p.floor = "X^T Z + X P";
  p.finite_check = [](const implicit::DigitsDataset& d, const ProblemSettings& s, const ScalarRange& scalar) {
    return ScaleRangeError("--beta", "beta * max|score|", s.beta, MaxDigitScore(d, s.patterns), scalar);
  };
  return p;
}());

}  // namespace
}  // namespace implicit_apps
