// SpectralNorm: the one JacobiSVD instantiation of the project.
#include <implicit/core/spectral_norm.h>

#include <Eigen/SVD>

namespace implicit {

double SpectralNorm(ConstMatrixRef<double> m) {
  if (m.size() == 0) return 0.0;
  return Eigen::JacobiSVD<Matrix<double>>(m).singularValues()(0);
}

}  // namespace implicit
