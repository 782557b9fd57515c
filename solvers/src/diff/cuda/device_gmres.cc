// Restarted GMRES for the device adjoint (device_gmres.h).
#include "device_gmres.h"

#include "krylov_kernels.h"

#include <implicit/core/cuda_kernels.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/device_staging.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace implicit {
namespace cuda {
namespace internal {

template <typename Scalar>
Summary GmresAdjoint(Context& context, const DeviceMap<Scalar>& map, const DeviceMatrix<Scalar>& z_star,
                     const DeviceMatrix<Scalar>& g, const LinearSolverOptions& options, DeviceMatrix<Scalar>* u) {
  const Index n = map.dimension(), batch = g.cols();
  const int ni = static_cast<int>(n), m = options.restart;
  const cudaStream_t stream = context.stream();
  const std::size_t nb = static_cast<std::size_t>(n) * batch;
  const long long stride = static_cast<long long>(nb);
  auto slot = [&](int s, std::size_t count) {
    return static_cast<Scalar*>(context.Workspace(s, sizeof(Scalar) * std::max<std::size_t>(count, 1)));
  };
  Scalar* V = slot(kSlotKrylov, nb * (m + 1));  // V_i = V + i * stride
  Scalar* w = slot(kSlotKrylovW, nb);
  Scalar* r = slot(kSlotKrylovR, nb);
  Scalar* jtv = slot(kSlotKrylovJtv, nb);
  Scalar* compact_in = slot(kSlotKrylovCompactIn, nb);
  Scalar* compact_out = slot(kSlotKrylovCompactOut, nb);
  Scalar* compact_z = slot(kSlotAdjointZ, nb);
  // Uploads between two synchronisations: two column lists, m x B coefficients
  // and B scale factors.
  const std::size_t upload_bytes = 2 * sizeof(int) * batch + sizeof(double) * (m + 1) * batch + 1024;
  DeviceStaging io(context, {kSlotKrylovUpload, kPinnedKrylovUpload, upload_bytes},
                   {kSlotKrylovDownload, kPinnedKrylovDownload, static_cast<std::size_t>(m + 1) * batch});

  std::vector<int> listed;
  auto upload_columns = [&](const std::vector<Index>& columns) -> const int* {
    if (static_cast<Index>(columns.size()) == batch) return nullptr;
    listed.assign(columns.begin(), columns.end());
    return io.Upload(listed.data(), listed.size());
  };
  // out(:, b) = v(:, b) - (J^T v)(:, b) for the listed columns (one batch of products).
  auto apply = [&](const Scalar* v, const std::vector<Index>& columns, const int* d_columns, Scalar* out) {
    const int c = static_cast<int>(columns.size());
    if (d_columns == nullptr) {
      map.VectorJacobianProduct(context, z_star.data(), v, batch, nullptr, jtv);
    } else {
      GatherColumns<Scalar>(stream, z_star.data(), ni, d_columns, c, compact_z);
      GatherColumns<Scalar>(stream, v, ni, d_columns, c, compact_in);
      map.VectorJacobianProduct(context, compact_z, compact_in, c, d_columns, compact_out);
      ScatterColumns<Scalar>(stream, compact_out, ni, d_columns, c, jtv);
    }
    SubtractColumns<Scalar>(stream, v, jtv, ni, d_columns, c, out);
  };
  // Per listed sample: the norm of x's column (and whether it is finite).
  auto norms = [&](const Scalar* x, const std::vector<Index>& columns, const int* d_columns) {
    BasisDots<Scalar>(stream, x, 0, 1, x, ni, d_columns, static_cast<int>(columns.size()), io.results());
    const double* sq = io.Download(columns.size());
    std::vector<double> out(columns.size());
    for (std::size_t j = 0; j < columns.size(); ++j) out[j] = std::sqrt(sq[j]);
    return out;
  };

  std::vector<Index> all(batch);
  for (Index b = 0; b < batch; ++b) all[b] = b;
  const std::vector<double> rhs_norm = norms(g.data(), all, nullptr);
  implicit::internal::BatchMonitor<Scalar> monitor("gmres", rhs_norm, options);

  // Per sample: Hessenberg ((m+1) x m, column-major), Givens rotations, the rotated rhs.
  std::vector<double> H(static_cast<std::size_t>(m + 1) * m * batch), cs(m * batch), sn(m * batch),
      gam((m + 1) * batch), residual(batch), finite(batch), coef;
  std::vector<int> steps(batch);
  std::vector<Index> running, still;
  auto h = [&](Index b, int i, int j) -> double& { return H[(static_cast<std::size_t>(b) * m + j) * (m + 1) + i]; };

  while (true) {
    // The true residual r = g - (I - J^T) u of the active samples, judged.
    const std::vector<Index> active = monitor.active_columns();
    const int* d_active = upload_columns(active);
    apply(u->data(), active, d_active, w);
    monitor.CountEvaluations(active);
    SubtractColumns<Scalar>(stream, g.data(), w, ni, d_active, static_cast<int>(active.size()), r);
    const std::vector<double> r_norm = norms(r, active, d_active);
    for (std::size_t j = 0; j < active.size(); ++j) {
      residual[active[j]] = r_norm[j];
      finite[active[j]] = std::isfinite(r_norm[j]) ? 1.0 : 0.0;
    }
    if (!monitor.ResidualScalars(residual.data(), finite.data()) || !monitor.budget_left()) break;

    // A cycle of at most m Krylov steps for the samples still active.
    running = monitor.active_columns();
    std::vector<double> scale(running.size());
    for (std::size_t j = 0; j < running.size(); ++j) {
      const Index b = running[j];
      std::fill(gam.begin() + b * (m + 1), gam.begin() + (b + 1) * (m + 1), 0.0);
      gam[b * (m + 1)] = residual[b];
      steps[b] = 0;
      scale[j] = 1.0 / residual[b];
    }
    const std::vector<Index> cycle = running;
    const int* d_cycle = upload_columns(cycle);
    BasisCombine<Scalar>(stream, r, 0, 1, io.Upload(scale.data(), scale.size()), ni, d_cycle,
                         static_cast<int>(cycle.size()), false, V);  // V_0 = r / |r|
    for (int j = 0; j < m && !running.empty() && monitor.budget_left(); ++j) {
      const int c = static_cast<int>(running.size());
      const int* d_run = upload_columns(running);
      apply(V + j * stride, running, d_run, w);
      monitor.CountIteration();
      monitor.CountEvaluations(running);
      // Classical Gram-Schmidt, twice: h_j = V^T w, w -= V h_j.
      std::vector<double> hj(static_cast<std::size_t>(c) * (j + 1), 0.0);
      for (int pass = 0; pass < 2; ++pass) {
        BasisDots<Scalar>(stream, V, stride, j + 1, w, ni, d_run, c, io.results());
        const double* dots = io.Download(static_cast<std::size_t>(c) * (j + 1));
        d_run = upload_columns(running);
        std::vector<double> minus(dots, dots + static_cast<std::size_t>(c) * (j + 1));
        for (std::size_t e = 0; e < minus.size(); ++e) {
          hj[e] += minus[e];
          minus[e] = -minus[e];
        }
        BasisCombine<Scalar>(stream, V, stride, j + 1, io.Upload(minus.data(), minus.size()), ni, d_run, c, true,
                             w);
      }
      const std::vector<double> hnext = norms(w, running, d_run);
      d_run = upload_columns(running);
      std::vector<double> inverse(running.size());
      still.clear();
      for (int q = 0; q < c; ++q) {
        const Index b = running[q];
        for (int i = 0; i <= j; ++i) h(b, i, j) = hj[static_cast<std::size_t>(q) * (j + 1) + i];
        h(b, j + 1, j) = hnext[q];
        inverse[q] = hnext[q] > 0 ? 1.0 / hnext[q] : 0.0;
        for (int i = 0; i < j; ++i) {  // the previous rotations
          const double a = h(b, i, j), d = h(b, i + 1, j);
          h(b, i, j) = cs[b * m + i] * a + sn[b * m + i] * d;
          h(b, i + 1, j) = -sn[b * m + i] * a + cs[b * m + i] * d;
        }
        const double rho = std::hypot(h(b, j, j), h(b, j + 1, j));
        cs[b * m + j] = rho > 0 ? h(b, j, j) / rho : 1.0;
        sn[b * m + j] = rho > 0 ? h(b, j + 1, j) / rho : 0.0;
        h(b, j, j) = rho;
        h(b, j + 1, j) = 0.0;
        gam[b * (m + 1) + j + 1] = -sn[b * m + j] * gam[b * (m + 1) + j];
        gam[b * (m + 1) + j] *= cs[b * m + j];
        steps[b] = j + 1;
        // Estimate met, Krylov space exhausted or broken: the restart checks
        // the true residual.
        const double estimate = std::abs(gam[b * (m + 1) + j + 1]);
        if (!(estimate <= monitor.threshold(b)) && hnext[q] > 0 && rho > 0 && std::isfinite(estimate)) {
          still.push_back(b);
        }
      }
      BasisCombine<Scalar>(stream, w, 0, 1, io.Upload(inverse.data(), inverse.size()), ni, d_run, c, false,
                           V + (j + 1) * stride);
      running.swap(still);
    }
    // u += V_k y, H_k y = gamma_k (upper triangular), per sample of the cycle.
    coef.assign(cycle.size() * m, 0.0);
    for (std::size_t q = 0; q < cycle.size(); ++q) {
      const Index b = cycle[q];
      double* y = coef.data() + q * m;
      for (int i = steps[b] - 1; i >= 0; --i) {
        double sum = gam[b * (m + 1) + i];
        for (int l = i + 1; l < steps[b]; ++l) sum -= h(b, i, l) * y[l];
        y[i] = std::abs(h(b, i, i)) > 0 ? sum / h(b, i, i) : 0.0;
      }
    }
    BasisCombine<Scalar>(stream, V, stride, m, io.Upload(coef.data(), coef.size()), ni, upload_columns(cycle),
                         static_cast<int>(cycle.size()), true, u->data());
  }
  std::vector<Index> restore;  // none: a linear solve returns its final iterate
  return monitor.FinishScalars(&restore);
}

template Summary GmresAdjoint<float>(Context&, const DeviceMap<float>&, const DeviceMatrix<float>&,
                                     const DeviceMatrix<float>&, const LinearSolverOptions&, DeviceMatrix<float>*);
template Summary GmresAdjoint<double>(Context&, const DeviceMap<double>&, const DeviceMatrix<double>&,
                                      const DeviceMatrix<double>&, const LinearSolverOptions&,
                                      DeviceMatrix<double>*);

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
