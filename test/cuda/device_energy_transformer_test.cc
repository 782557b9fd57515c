// The Energy Transformer's dynamics on the device against the CPU map:
// f(x) = x - a dE/dg and E, with and without clamped tokens, ReLU and softmax
// memories, with and without self-attention pairs, in double and float; its
// J^T u, parameter and input products; device solves of the clamped dynamics
// and IFT gradients against the CPU's. Reported as
// skipped without a device.
#define BOOST_TEST_MODULE cuda_device_energy_transformer
#include <boost/test/unit_test.hpp>

#include <implicit/layers/cuda_energy_transformer.h>
#include <implicit/layers/energy_transformer_map.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/registry.h>

#include "support/device_gradient_checks.h"
#include "support/gpu.h"
#include "support/test_problems.h"

#include <limits>
#include <string>

namespace {

using namespace implicit;
using implicit::testing::GpuPresent;
using implicit::testing::RandomMatrix;

EnergyTransformerOptions SmallEt(EnergyTransformerMemory memory, bool exclude_self) {
  EnergyTransformerOptions o;
  o.num_tokens = 8;
  o.token_dim = 6;
  o.num_heads = 2;
  o.head_dim = 3;
  o.num_memories = 10;
  o.memory = memory;
  o.memory_beta = 2.0;
  o.exclude_self = exclude_self;
  o.gamma = 1.3;
  o.delta = 0.2;
  return o;
}

// A per-coordinate free mask: the last 3 tokens of each sample free.
Matrix<double> FreeMask(const EnergyTransformerOptions& o, Index B) {
  Matrix<double> m = Matrix<double>::Zero(o.num_tokens * o.token_dim, B);
  m.bottomRows(3 * o.token_dim).setOnes();
  return m;
}

// A small clamped ET (ReLU memory, self-pairs excluded, weights drawn with
// `weights_seed`) on B random images, as the CPU map and the device map.
struct ClampedEt {
  ClampedEt(cuda::Context& context, Index batch, unsigned weights_seed, unsigned images_seed)
      : options(SmallEt(EnergyTransformerMemory::kRelu, true)), et(options), cpu(et, 0.5), gpu(context, et, 0.5) {
    et.Initialize(weights_seed, 0.3);
    gpu.SyncParameters(context);
    n = et.dimension();
    images = RandomMatrix<double>(n, batch, images_seed);
    mask = FreeMask(options, batch);
    cpu.SetClamp(mask, images);
    gpu.SetClamp(context, mask, images);
  }
  // The equilibrium of the device map from the images (Anderson, 1e-12).
  cuda::DeviceMatrix<double> Equilibrium(cuda::Context& context) {
    SolverOptions base;
    base.absolute_tolerance = 1e-12;
    base.max_iterations = 2000;
    cuda::DeviceMatrix<double> z(context, images);
    BOOST_REQUIRE(cuda::MakeDeviceSolver<double>("anderson", {}, base)->Solve(context, gpu, z).IsConverged());
    return z;
  }
  EnergyTransformerOptions options;
  EnergyTransformer<double> et;
  EnergyTransformerMap<double> cpu;
  cuda::EnergyTransformerMap<double> gpu;
  Index n = 0;
  Matrix<double> images, mask;
};

// f, E, J^T u, the parameter and (clamped) input products of the device map
// against the CPU map at random points, and f in float.
void CompareWithCpu(cuda::Context& context, const EnergyTransformerOptions& o, bool clamp, Index B) {
  EnergyTransformer<double> et(o);
  et.Initialize(3, 0.5);
  const Index n = et.dimension();
  const Matrix<double> x = RandomMatrix<double>(n, B, 7), values = RandomMatrix<double>(n, B, 8);
  EnergyTransformerMap<double> cpu(et, 0.5);
  cuda::EnergyTransformerMap<double> gpu(context, et, 0.5);
  if (clamp) {
    cpu.SetClamp(FreeMask(o, B), values);
    gpu.SetClamp(context, FreeMask(o, B), values);
  }
  Matrix<double> f_cpu(n, B);
  Vector<double> e_cpu(B);
  cpu.EvaluateWithEnergy(x, f_cpu, e_cpu);
  cuda::DeviceMatrix<double> xd(context, x), fd(n, B), ed(1, B);
  gpu.Evaluate(context, xd.data(), B, nullptr, fd.data(), ed.data());
  const Matrix<double> f_gpu = fd.ToHost(context), e_gpu = ed.ToHost(context);
  BOOST_TEST((f_gpu - f_cpu).norm() <= 1e-12 * (1 + f_cpu.norm()));
  BOOST_TEST((e_gpu.transpose() - e_cpu).norm() <= 1e-12 * (1 + e_cpu.norm()));

  // The products of the backward pass: J^T u and the parameter product.
  const Matrix<double> u = RandomMatrix<double>(n, B, 9);
  Matrix<double> vjp_cpu(n, B);
  cpu.VectorJacobianProduct(x, u, vjp_cpu);
  cuda::DeviceMatrix<double> ud(context, u), vjp(n, B), dtheta(gpu.num_parameters(), 1);
  gpu.VectorJacobianProduct(context, xd.data(), ud.data(), B, nullptr, vjp.data());
  BOOST_TEST((vjp.ToHost(context) - vjp_cpu).norm() <= 1e-11 * (1 + vjp_cpu.norm()));
  Vector<double> dtheta_cpu(cpu.num_parameters());
  cpu.ParameterVectorJacobianProduct(x, u, dtheta_cpu);
  BOOST_REQUIRE(gpu.num_parameters() == cpu.num_parameters());
  gpu.ParameterVectorJacobianProduct(context, xd.data(), ud.data(), B, dtheta.data());
  BOOST_TEST((dtheta.ToHost(context).col(0) - dtheta_cpu).norm() <= 1e-11 * (1 + dtheta_cpu.norm()));
  // The product with the clamped values (the map's input).
  BOOST_TEST(gpu.input_dimension() == cpu.input_dimension());
  if (clamp) {
    Matrix<double> dc_cpu(n, B);
    cpu.InputVectorJacobianProduct(x, u, dc_cpu);
    cuda::DeviceMatrix<double> dc(n, B);
    gpu.InputVectorJacobianProduct(context, xd.data(), ud.data(), B, dc.data());
    BOOST_TEST((dc.ToHost(context) - dc_cpu).norm() <= 1e-11 * (1 + dc_cpu.norm()));
    BOOST_CHECK_THROW(gpu.InputVectorJacobianProduct(context, xd.data(), ud.data(), B - 1, dc.data()),
                      std::invalid_argument);
  }

  // Float: the same to float precision.
  EnergyTransformer<float> et_float(o);
  et_float.parameters()->values() = et.parameters()->values().cast<float>();
  cuda::EnergyTransformerMap<float> gpu_float(context, et_float, 0.5f);
  if (clamp) gpu_float.SetClamp(context, FreeMask(o, B).cast<float>(), values.cast<float>());
  cuda::DeviceMatrix<float> xf(context, x.cast<float>()), ff(n, B);
  gpu_float.Evaluate(context, xf.data(), B, nullptr, ff.data(), nullptr);
  BOOST_TEST((ff.ToHost(context).cast<double>() - f_cpu).norm() <= 1e-4 * (1 + f_cpu.norm()));
}

}  // namespace

BOOST_AUTO_TEST_CASE(et_map_value_and_energy_match_the_cpu, *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  for (auto memory : {EnergyTransformerMemory::kRelu, EnergyTransformerMemory::kSoftmax}) {
    for (bool exclude_self : {true, false}) {
      for (bool clamp : {false, true}) {
        BOOST_TEST_CONTEXT("relu " << (memory == EnergyTransformerMemory::kRelu) << ", exclude_self "
                                   << exclude_self << ", clamp " << clamp) {
          CompareWithCpu(context, SmallEt(memory, exclude_self), clamp, 13);
        }
      }
    }
  }
}

// Heads whose (head, sample) blocks do not fit one thread block's shared
// memory in double (40 tokens, heads of 24) take the batched-GEMM path.
BOOST_AUTO_TEST_CASE(large_heads_take_the_batched_path_and_match_the_cpu,
                     *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  EnergyTransformerOptions o = SmallEt(EnergyTransformerMemory::kSoftmax, true);
  o.num_tokens = 40;
  o.token_dim = 5;
  o.num_heads = 2;
  o.head_dim = 24;
  o.num_memories = 3;
  for (bool clamp : {false, true}) {
    BOOST_TEST_CONTEXT("clamp " << clamp) { CompareWithCpu(context, o, clamp, 3); }
  }
}

BOOST_AUTO_TEST_CASE(clamped_et_solves_match_the_cpu, *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  const Index B = 24;
  ClampedEt problem(context, B, 5, 11);
  const Index n = problem.n;
  const Matrix<double>& images = problem.images;
  for (const std::string name : {"picard", "anderson"}) {
    BOOST_TEST_CONTEXT("solver " << name) {
      SolverOptions base;
      base.absolute_tolerance = 1e-9;
      base.max_iterations = 500;
      Matrix<double> z_cpu = images, z_gpu = images;
      const Summary s_cpu = MakeSolver<double>(name, {}, base)->Solve(problem.cpu, z_cpu);
      const Summary s_gpu = cuda::MakeDeviceSolver<double>(name, {}, base)->Solve(context, problem.gpu, z_gpu);
      BOOST_TEST(s_cpu.IsConverged());
      BOOST_TEST(s_gpu.IsConverged());
      for (std::size_t b = 0; b < s_cpu.sample_status.size(); ++b) {
        BOOST_TEST(static_cast<int>(s_gpu.sample_status[b]) == static_cast<int>(s_cpu.sample_status[b]));
      }
      // A fixed point of the CPU map, and the CPU's own.
      Matrix<double> f(n, B);
      problem.cpu.Evaluate(z_gpu, f);
      BOOST_TEST((f - z_gpu).colwise().norm().maxCoeff() <= 2e-9);
      BOOST_TEST((z_gpu - z_cpu).norm() <= 1e-6 * (1 + z_cpu.norm()));
      // The clamped coordinates kept their values.
      BOOST_TEST(((Matrix<double>::Ones(n, B) - problem.mask).cwiseProduct(z_gpu - images)).norm() == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(device_ift_gradients_of_the_clamped_et_match_the_cpu,
                     *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  const Index B = 16;
  ClampedEt problem(context, B, 13, 17);
  cuda::DeviceMatrix<double> z = problem.Equilibrium(context);
  const Matrix<double> z_star = z.ToHost(context);
  const Matrix<double> grad = RandomMatrix<double>(problem.n, B, 19);
  cuda::DeviceMatrix<double> grad_device(context, grad);
  BackwardOptions cpu_options;
  cpu_options.tolerance = 1e-12;
  cpu_options.max_iterations = 1000;
  const BackwardResult<double> expected = ImplicitBackward(problem.cpu, z_star, grad, cpu_options);
  BOOST_REQUIRE(expected.ok());
  implicit::testing::CheckDeviceGradients(context, problem.gpu, z, grad_device, expected, /*compare_adjoint=*/false);
}

// A sample whose adjoint fails (a NaN in its loss gradient) on the device as
// on the CPU: NaN parameter gradient by default; with drop_failed_samples the
// other samples' sum; the failed sample's input-gradient column NaN, the
// others' as on the CPU.
BOOST_AUTO_TEST_CASE(a_failed_adjoint_sample_is_dropped_or_reported_as_on_the_cpu,
                     *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  const Index B = 8, bad = 3;
  ClampedEt problem(context, B, 13, 17);
  cuda::DeviceMatrix<double> z = problem.Equilibrium(context);
  const Matrix<double> z_star = z.ToHost(context);
  Matrix<double> grad = RandomMatrix<double>(problem.n, B, 19);
  grad(5, bad) = std::numeric_limits<double>::quiet_NaN();
  cuda::DeviceMatrix<double> grad_device(context, grad);
  for (const std::string linear : {"anderson", "gmres"}) {
    for (bool drop : {false, true}) {
      BOOST_TEST_CONTEXT("adjoint solver " << linear << ", drop_failed_samples " << drop) {
        BackwardOptions options;
        options.tolerance = 1e-12;
        options.max_iterations = 1000;
        options.drop_failed_samples = drop;
        const BackwardResult<double> expected = ImplicitBackward(problem.cpu, z_star, grad, options);
        options.linear_solver = linear;
        const auto g = cuda::ImplicitBackward(context, problem.gpu, z, grad_device, options);
        BOOST_TEST(!g.ok());
        for (Index b = 0; b < B; ++b) {
          BOOST_TEST((g.summary.sample_status[b] == TerminationType::kConverged) == (b != bad));
        }
        const Vector<double> dtheta = g.parameter_gradient.ToHost(context).col(0);
        if (drop) {
          BOOST_REQUIRE(expected.parameter_gradient.allFinite());
          BOOST_TEST((dtheta - expected.parameter_gradient).norm() <= 1e-8 * expected.parameter_gradient.norm());
        } else {
          BOOST_TEST(dtheta.array().isNaN().all());
        }
        const Matrix<double> dc = g.input_gradient.ToHost(context);
        for (Index b = 0; b < B; ++b) {
          if (b == bad) {
            BOOST_TEST(dc.col(b).array().isNaN().all());
          } else {
            BOOST_TEST((dc.col(b) - expected.input_gradient.col(b)).norm() <=
                       1e-8 * (1 + expected.input_gradient.col(b).norm()));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_bad_clamp_or_step_is_refused, *boost::unit_test::precondition(GpuPresent())) {
  cuda::Context context;
  EnergyTransformer<double> et(SmallEt(EnergyTransformerMemory::kRelu, true));
  BOOST_CHECK_THROW(cuda::EnergyTransformerMap<double>(context, et, 0.0), std::invalid_argument);
  cuda::EnergyTransformerMap<double> map(context, et, 0.5);
  BOOST_CHECK_THROW(map.SetClamp(context, Matrix<double>::Ones(5, 3), Matrix<double>::Ones(5, 3)),
                    std::invalid_argument);
}
