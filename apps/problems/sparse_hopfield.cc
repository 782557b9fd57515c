// sparse-hopfield: Hopfield-Fenchel-Young retrieval of the digits with the
// entmax update xi <- X entmax_alpha(beta X^T xi).
#include "problems/digits_cccp.h"
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/layers/regularized_attention.h>
#ifdef IMPLICIT_WITH_CUDA
#include <implicit/core/cuda_hopfield.h>
#endif

#include <string>

namespace implicit_apps {
namespace {

template <typename S>
using SparseHopfieldBase = DigitsCccpProblemT<S, implicit::SparseHopfieldEnergy<S>>;

template <typename S>
class SparseHopfieldProblemT : public SparseHopfieldBase<S> {
 public:
  SparseHopfieldProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : SparseHopfieldBase<S>(digits, s.patterns, 1.0, "X",
                              "the two dense GEMMs of one step xi <- X entmax(beta X^T xi) on all B queries, in the "
                              "column blocks the energy uses; the entmax threshold search over N scores per query is "
                              "extra (and usually dominates)",
                              Options(s)),
        beta_(s.beta),
        alpha_(s.Parameter("alpha")) {}
  std::string name() const override { return "sparse-hopfield"; }
#ifdef IMPLICIT_WITH_CUDA
  // On the GPU: sparsemax (alpha = 2) only.
  std::unique_ptr<implicit::cuda::DeviceMap<S>> MakeDeviceMap(implicit::cuda::Context& context) const override {
    if (alpha_ != 2.0) return nullptr;
    return std::make_unique<implicit::cuda::HopfieldCccpMap<S>>(context, this->weights(), static_cast<S>(beta_),
                                                               implicit::cuda::Attention::kSparsemax);
  }
#endif
  std::string description() const override {
    return "Hopfield-Fenchel-Young retrieval xi <- X entmax_" + Fmt(alpha_) + "(beta X^T xi), " +
           std::to_string(this->stored()) + " digits, beta " + Fmt(beta_);
  }

 private:
  static implicit::SparseHopfieldOptions Options(const ProblemSettings& s) {
    implicit::SparseHopfieldOptions o;
    o.alpha = s.Parameter("alpha");
    o.beta = s.beta;
    return o;
  }
  double beta_, alpha_;
};

const bool kSparseHopfieldRegistered = RegisterProblem<SparseHopfieldProblemT>([] {
  ProblemInfo p;
  p.name = "sparse-hopfield";
  p.order = 20;
  p.summary = "the same with the entmax (sparse) update";
  p.floor = "X^T Z + X P, as hopfield-digits";
  p.parameters = {{"alpha", 1.5, "entmax order of sparse-hopfield", ">= 1", [](double a) { return a >= 1; }}};
  // entmax_alpha works on (alpha - 1) beta X^T xi.
  p.finite_check = [](const implicit::DigitsDataset& d, const ProblemSettings& s, const ScalarRange& scalar) {
    const double score = MaxDigitScore(d, s.patterns), alpha = s.Parameter("alpha");
    const std::string beta = ScaleRangeError("--beta", "beta * max|score|", s.beta, score, scalar);
    if (!beta.empty() || alpha <= 2) return beta;
    return ScaleRangeError("--alpha", "(alpha - 1) * beta * max|score|", alpha - 1, s.beta * score, scalar);
  };
  return p;
}());

}  // namespace
}  // namespace implicit_apps
