// rbm: an RBM-effective energy on the digits.
#include "problems/digits_cccp.h"
#include "problems/registry.h"

#include "common/format.h"

#include <implicit/layers/rbm.h>

#include <memory>
#include <string>

namespace implicit_apps {
namespace {

template <typename S>
using RbmBase = DigitsCccpProblemT<S, implicit::RbmEnergy<S>>;

// An RBM with Gaussian visible units and Bernoulli(p) hidden units, one hidden
// unit per stored digit with couplings w_mu = c x_mu, integrated out:
//   E(v) = 0.5 |v|^2 - sum_mu log(1 - p + p exp(w_mu . v)),
// CCCP map v <- W sigmoid(W^T v + logit p); queries: bottom half zeroed.
template <typename S>
class RbmProblemT : public RbmBase<S> {
 public:
  RbmProblemT(const implicit::DigitsDataset& digits, const ProblemSettings& s)
      : RbmBase<S>(digits, s.patterns, s.Parameter("rbm-scale"), "W",
                   "the two GEMMs of one CCCP step v <- W sigmoid(W^T v + logit p) on all B queries, in the "
                   "column blocks the energy uses; the sigmoids and the solver's vector work are extra",
                   std::make_shared<implicit::BernoulliPrior<S>>(static_cast<S>(s.Parameter("rbm-p"))), Options()),
        p_(s.Parameter("rbm-p")),
        scale_(s.Parameter("rbm-scale")) {}
  std::string name() const override { return "rbm"; }
  std::string description() const override {
    return "RBM-effective energy, Gaussian visible, " + std::to_string(this->stored()) + " Bernoulli(" + Fmt(p_) +
           ") hidden units with couplings " + Fmt(scale_) + " x digit; CCCP map v <- W sigmoid(W^T v + logit p)";
  }

 private:
  static typename implicit::RbmEnergy<S>::Options Options() {
    typename implicit::RbmEnergy<S>::Options o;
    o.learn_weights = false;
    return o;
  }
  double p_, scale_;
};

const bool kRbmRegistered = RegisterProblem<RbmProblemT>([] {
  ProblemInfo p;
  p.name = "rbm";
  p.order = 30;
  p.summary = "RBM-effective energy on the digits";
  p.floor = "W^T V + W S";
  p.parameters = {
      {"rbm-scale", 0.03, "couplings of rbm, W = C x digits", "in (0, 1e6]",
       [](double c) { return c > 0 && c <= 1e6; }},
      {"rbm-p", 0.1, "Bernoulli prior of rbm's hidden units", "in (0, 1)", [](double q) { return q > 0 && q < 1; }}};
  return p;
}());

}  // namespace
}  // namespace implicit_apps
