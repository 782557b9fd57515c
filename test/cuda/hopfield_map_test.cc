// The GPU Hopfield map agrees with the CPU map. Skips (reported as skipped, not
// passed) when no CUDA device is present, e.g. on the CI machines.
#define BOOST_TEST_MODULE cuda_hopfield_map
#include <boost/test/unit_test.hpp>

#include <implicit/core/cuda.h>
#include <implicit/solvers/picard.h>

#include "support/gpu.h"
#include "support/test_problems.h"

using implicit::testing::GpuPresent;

BOOST_AUTO_TEST_CASE(without_a_device_construction_fails_clearly) {
  std::string reason;
  if (implicit::cuda::Available(&reason)) return;  // only meaningful without a GPU
  BOOST_TEST(!reason.empty());
  BOOST_CHECK_THROW(implicit::cuda::HopfieldRetrievalMap<float>(implicit::Matrix<float>::Ones(4, 3), 1.0f),
                    std::runtime_error);
}

BOOST_AUTO_TEST_CASE(gpu_map_matches_cpu_map, *boost::unit_test::precondition(GpuPresent())) {
  using namespace implicit;
  const Index n = 64, N = 500, B = 37;
  Matrix<double> X = testing::RandomMatrix<double>(n, N, 3);
  Matrix<double> z = testing::RandomMatrix<double>(n, B, 4);
  testing::HopfieldMap<double> cpu(X, 2.0);
  cuda::HopfieldRetrievalMap<double> gpu(X, 2.0);
  Matrix<double> f_cpu(n, B), f_gpu(n, B);
  cpu.Evaluate(z, f_cpu);
  gpu.Evaluate(z, f_gpu);
  BOOST_TEST((f_cpu - f_gpu).norm() <= 1e-10 * (1 + f_cpu.norm()));

  cuda::HopfieldRetrievalMap<float> gpu_float(X.cast<float>(), 2.0f);
  Matrix<float> zf = z.cast<float>(), ff(n, B);
  gpu_float.Evaluate(zf, ff);
  BOOST_TEST((f_cpu.cast<float>() - ff).norm() <= 1e-3f * (1 + f_cpu.norm()));

  // A solve with the GPU map reaches a true fixed point of the CPU map.
  Matrix<double> zs = X.leftCols(B);
  PicardSolver<double>::Options options;
  options.absolute_tolerance = 1e-9;
  options.max_iterations = 500;
  Summary s = PicardSolver<double>(options).Solve(gpu, zs);
  cpu.Evaluate(zs, f_cpu);
  BOOST_TEST((f_cpu - zs).colwise().norm().maxCoeff() <= 1e-8);
  BOOST_TEST(s.function_evaluations >= s.iterations);
}
