// Compiled once for float and double (see "Compile once" in types.h).
#include <implicit/layers/hidden_prior.h>

namespace implicit {
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(GaussianPrior);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(PoissonPrior);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(BernoulliPrior);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(ConstantPrior);
IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(CustomPrior);
}  // namespace implicit
