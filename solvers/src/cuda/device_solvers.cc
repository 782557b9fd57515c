// Picard and guarded Anderson on the device (cuda_solvers.h). The state, the
// histories and every vector operation stay on the device; per iteration the
// host receives the active samples' scalars, judges them with the CPU
// solvers' BatchMonitor and GuardRules, and sends back index lists and
// per-sample coefficients. Picard on a softmax HopfieldCccpMap runs instead
// the fused loop (solvers/src/cuda/fused_picard.cu): one kernel, judged on the device,
// its Summary completed here from the per-sample results.
#include <implicit/core/cuda_hopfield.h>
#include <implicit/core/cuda_kernels.h>
#include <implicit/solvers/internal/solver_kernels.h>
#include <implicit/solvers/cuda_solvers.h>
#include <implicit/solvers/internal/batch_monitor.h>
#include <implicit/solvers/internal/device_staging.h>
#include <implicit/solvers/internal/fused_rules.h>
#include <implicit/solvers/internal/guarded_step.h>
#include <implicit/solvers/registry.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace cuda {
namespace {

static_assert(kMaxDeviceAndersonMemory == internal::kMaxAndersonKernelMemory,
              "the solver's memory bound is the kernel's");


// A workspace slot of the context as rows x cols scalars.
template <typename T>
T* Slot(Context& context, int slot, std::size_t count) {
  return static_cast<T*>(context.Workspace(slot, sizeof(T) * std::max<std::size_t>(count, 1)));
}

// What one device solve shares: the host <-> device traffic of small
// per-sample arrays, the (compacted) map evaluation and the monitor's view.
template <typename S>
class DeviceSolve {
 public:
  DeviceSolve(Context& context, const DeviceMap<S>& map, DeviceMatrix<S>& z, const SolverOptions& options,
              const std::string& name)
      : context_(context),
        map_(map),
        n_(map.dimension()),
        batch_(z.cols()),
        energy_(options.use_energy && map.has_energy()),
        monitor_(options, name),
        staging_(context, {internal::kSlotUpload, internal::kPinnedUpload, Capacity(batch_)},
                 {internal::kSlotDownload, internal::kPinnedDownload, Results(batch_)}) {
    if (z.rows() != n_ || z.cols() < 1) {
      throw std::invalid_argument(name + ": initial state z must be " + std::to_string(n_) +
                                  " x B with B >= 1 (the map's dimension), got " + std::to_string(z.rows()) +
                                  " x " + std::to_string(z.cols()));
    }
    namespace k = internal;
    const std::size_t nb = static_cast<std::size_t>(n_) * batch_, b = batch_;
    f_ = Slot<S>(context, k::kSlotF, nb);
    e_ = Slot<S>(context, k::kSlotE, b);
    kept_ = Slot<S>(context, k::kSlotKept, nb);
    compact_in_ = Slot<S>(context, k::kSlotCompactIn, nb);
    compact_out_ = Slot<S>(context, k::kSlotCompactOut, nb);
    compact_e_ = Slot<S>(context, k::kSlotCompactE, b);
    active_device_ = Slot<int>(context, k::kSlotActive, b);
    active_host_ = static_cast<int*>(context.PinnedWorkspace(k::kPinnedActive, sizeof(int) * b));
    residual_.resize(batch_);
    f_norm_.resize(batch_);
    finite_.resize(batch_);
    energy_at_.resize(batch_);
    residual_of_.assign(batch_, 0.0);
    energy_of_.assign(batch_, 0.0);
    monitor_.BeginScalars(batch_);
  }

  Context& context() { return context_; }
  cudaStream_t stream() const { return context_.stream(); }
  implicit::internal::BatchMonitor<S>& monitor() { return monitor_; }
  Index n() const { return n_; }
  Index batch() const { return batch_; }
  bool with_energy() const { return energy_; }
  bool supports_subsets() const { return map_.SupportsSubsets(); }
  S* f() const { return f_; }
  S* e() const { return e_; }
  // At the last observation: |f(z_b) - z_b| and E(z_b) of each active sample.
  double residual_of(Index b) const { return residual_of_[b]; }
  double energy_of(Index b) const { return energy_of_[b]; }

  // Copies a small host array to the device (staged in pinned memory; valid
  // until the next Download()).
  template <typename T>
  T* Upload(const T* host, std::size_t count) {
    return staging_.Upload(host, count);
  }
  // The batch columns of a list (ascending, no repeats) for the kernels:
  // nullptr when it is the whole batch (the kernels then index 0..B-1).
  const int* UploadColumns(const std::vector<Index>& columns) {
    if (static_cast<Index>(columns.size()) == batch_) return nullptr;
    if (&columns == &monitor_.active_columns()) return ActiveColumns();
    columns_int_.assign(columns.begin(), columns.end());
    return Upload(columns_int_.data(), columns_int_.size());
  }
  // The monitor's active list on the device, in its own buffer: uploaded
  // only when it changed since the last call (the list only shrinks, so a new
  // size is a new list, and it changes at most once between synchronisations).
  const int* ActiveColumns() {
    const std::vector<Index>& active = monitor_.active_columns();
    if (static_cast<Index>(active.size()) == batch_) return nullptr;
    if (active.size() != active_uploaded_) {
      std::copy(active.begin(), active.end(), active_host_);
      internal::CheckCall(cudaMemcpyAsync(active_device_, active_host_, sizeof(int) * active.size(),
                                          cudaMemcpyHostToDevice, stream()),
                          "upload of the active samples");
      active_uploaded_ = active.size();
    }
    return active_device_;
  }

  // The device array for per-sample results, and its download (which waits
  // for the stream and frees the upload staging).
  double* results() const { return staging_.results(); }
  const double* Download(std::size_t count) { return staging_.Download(count); }

  // For every b in `columns` (ascending): f(:, b) = f(points(:, b)) and, with
  // the energy, e[b] = E(points(:, b)); other columns are left alone. The
  // active set: only these columns are evaluated when the map supports subsets.
  void Evaluate(const S* points, const std::vector<Index>& columns, S* f, S* e) {
    Evaluate(points, columns, UploadColumns(columns), f, e);
  }
  // The same with the list already on the device (d_columns = UploadColumns(columns)).
  void Evaluate(const S* points, const std::vector<Index>& columns, const int* d_columns, S* f, S* e) {
    const Index count = static_cast<Index>(columns.size());
    if (count == 0) return;
    S* energy = energy_ ? e : nullptr;
    if (count == batch_) {  // the whole batch, in order
      map_.Evaluate(context_, points, batch_, nullptr, f, energy);
      monitor_.CountEvaluations(columns);
      return;
    }
    const int n = static_cast<int>(n_), c = static_cast<int>(count);
    if (!map_.SupportsSubsets()) {
      map_.Evaluate(context_, points, batch_, nullptr, compact_out_, energy_ ? compact_e_ : nullptr);
      internal::CopyColumns<S>(stream(), compact_out_, n, d_columns, c, f);
      if (energy_) internal::CopyColumns<S>(stream(), compact_e_, 1, d_columns, c, energy);
      monitor_.CountEvaluations(1);
      return;
    }
    internal::GatherColumns<S>(stream(), points, n, d_columns, c, compact_in_);
    map_.Evaluate(context_, compact_in_, count, d_columns, compact_out_, energy_ ? compact_e_ : nullptr);
    internal::ScatterColumns<S>(stream(), compact_out_, n, d_columns, c, f);
    if (energy_) internal::ScatterColumns<S>(stream(), compact_e_, 1, d_columns, c, energy);
    monitor_.CountEvaluations(columns);
  }

  // Judges the active samples at (z, f, e) with the monitor; keeps the best
  // iterates on the device. Returns true while some sample is active.
  bool Observe(const S* z) {
    return Observe(z, [](const int*, int, double*) { return std::size_t(0); }, nullptr);
  }
  // The same, with more per-sample results in the same download: with_scalars
  // (d_active, count, out) enqueues kernels for the samples active before the
  // observation that write its results to out and returns how many doubles;
  // *extra points to them on the host (valid until the next download), and
  // *observed lists the samples they are for.
  template <typename More>
  bool Observe(const S* z, More&& with_scalars, const double** extra, std::vector<Index>* observed = nullptr) {
    const std::vector<Index>& active = monitor_.active_columns();
    const int count = static_cast<int>(active.size());
    if (observed != nullptr) *observed = active;
    const int* d_active = ActiveColumns();
    internal::ResidualScalars<S>(stream(), z, f_, energy_ ? e_ : nullptr,
                                 static_cast<int>(n_), d_active, count, results());
    const std::size_t more = with_scalars(d_active, count, results() + 4 * static_cast<std::size_t>(count));
    const double* scalars = Download(4 * static_cast<std::size_t>(count) + more);
    if (extra != nullptr) *extra = scalars + 4 * static_cast<std::size_t>(count);
    for (int j = 0; j < count; ++j) {
      residual_[j] = scalars[4 * j];
      f_norm_[j] = scalars[4 * j + 1];
      finite_[j] = scalars[4 * j + 2];
      energy_at_[j] = scalars[4 * j + 3];
      residual_of_[active[j]] = residual_[j];
      energy_of_[active[j]] = energy_at_[j];
    }
    const bool running = monitor_.ObserveScalars(batch_, residual_.data(), f_norm_.data(), finite_.data(),
                                                 energy_ ? energy_at_.data() : nullptr, &keep_);
    if (static_cast<int>(keep_.size()) == count) {  // every observed sample: their list is on the device
      CopyColumns(z, n_, keep_, d_active, kept_);
    } else {
      CopyColumns(z, n_, keep_, kept_);
    }
    return running;
  }

  // dst(:, b) = src(:, b) for b in columns (rows-row columns); d_columns as
  // returned by UploadColumns(columns).
  void CopyColumns(const S* src, Index rows, const std::vector<Index>& columns, S* dst) {
    if (!columns.empty()) CopyColumns(src, rows, columns, UploadColumns(columns), dst);
  }
  void CopyColumns(const S* src, Index rows, const std::vector<Index>& columns, const int* d_columns, S* dst) {
    if (columns.empty()) return;
    internal::CopyColumns<S>(stream(), src, static_cast<int>(rows), d_columns, static_cast<int>(columns.size()),
                             dst);
  }

  // Returns the unconverged samples at their kept iterates; the summary.
  Summary Finish(S* z) {
    std::vector<Index> restore;
    Summary summary = monitor_.FinishScalars(&restore);
    CopyColumns(kept_, n_, restore, z);
    context_.Synchronize();
    return summary;
  }

 private:
  // Upload staging per synchronisation: a few index lists and two
  // coefficient arrays of B entries each.
  static std::size_t Capacity(Index batch) { return 16 * 8 * static_cast<std::size_t>(batch) + 1024; }
  // Per-sample results of one download: 4 observation scalars and up to 2 more.
  static std::size_t Results(Index batch) { return 6 * static_cast<std::size_t>(batch); }

  Context& context_;
  const DeviceMap<S>& map_;
  const Index n_, batch_;
  const bool energy_;
  implicit::internal::BatchMonitor<S> monitor_;
  // Context workspace: per-sample staging (pinned host and device) ...
  internal::DeviceStaging staging_;
  // ... f(z), E(z), the kept iterates, and the active set gathered.
  S *f_ = nullptr, *e_ = nullptr, *kept_ = nullptr;
  S *compact_in_ = nullptr, *compact_out_ = nullptr, *compact_e_ = nullptr;
  std::vector<int> columns_int_;
  int* active_device_ = nullptr;   // the active list (ActiveColumns)
  int* active_host_ = nullptr;     // its pinned staging
  std::size_t active_uploaded_ = 0;  // its length on the device (0: none yet)
  std::vector<double> residual_, f_norm_, finite_, energy_at_;  // per active sample
  std::vector<double> residual_of_, energy_of_;                 // per batch column
  std::vector<Index> keep_;
};

// ---- the fused loops (DeviceLoop::kFusedWhenPossible) -----------------------------------

// The Summary of a fused solve from its per-sample results (FusedHopfieldPicard,
// ClusterHopfieldPicard), completed as BatchMonitor completes a host-judged one.
Summary FusedSummary(const std::string& name, const double* results, int batch,
                     std::chrono::steady_clock::time_point start, const char* note) {
  namespace k = internal;
  Summary s;
  s.solver = name;
  s.sample_status.resize(batch);
  s.sample_residual.resize(batch);
  s.sample_iterations.resize(batch);
  s.sample_evaluations.resize(batch);
  s.sample_accelerated_steps.assign(batch, 0);
  s.sample_backtracks.assign(batch, 0);
  s.sample_fallbacks.assign(batch, 0);
  const double inf = std::numeric_limits<double>::infinity();
  double max_abs = 0, max_rel = 0;
  bool budget_spent = false;
  for (int b = 0; b < batch; ++b) {
    const double* r = results + 4 * static_cast<std::size_t>(b);
    switch (static_cast<int>(r[0])) {
      case k::kFusedConverged: s.sample_status[b] = TerminationType::kConverged; break;
      case k::kFusedDiverged: s.sample_status[b] = TerminationType::kDiverged; break;
      case k::kFusedStalled: s.sample_status[b] = TerminationType::kStalled; break;
      case k::kFusedNonFinite: s.sample_status[b] = TerminationType::kNonFinite; break;
      case k::kFusedMaxIterations: s.sample_status[b] = TerminationType::kMaxIterations; budget_spent = true; break;
      default: throw std::logic_error("the fused Picard kernel left a sample without a status");
    }
    s.sample_iterations[b] = static_cast<int>(r[1]);
    s.sample_evaluations[b] = s.sample_iterations[b] + 1;
    s.sample_residual[b] = r[2];
    s.iterations = std::max(s.iterations, s.sample_iterations[b]);
    max_abs = std::isfinite(r[2]) ? std::max(max_abs, r[2]) : inf;
    max_rel = std::isfinite(r[3]) ? std::max(max_rel, r[3]) : inf;
  }
  s.function_evaluations = s.iterations + 1;
  s.absolute_residual = max_abs;
  s.relative_residual = max_rel;
  s.termination_type = implicit::internal::BatchTermination(
      s, budget_spent ? TerminationType::kMaxIterations : TerminationType::kConverged);
  s.message = implicit::internal::BatchMessage(s, /*keep_best_iterate=*/true) + "; " + note;
  s.wall_time_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

// The whole Picard solve in one kernel, when the map and options allow it
// (DeviceLoop): the cluster kernel first unless `loop` asks for the grid
// kernel, then the grid kernel. Nothing otherwise, with the reason in *why_not when the map is
// one the fused loop is written for (a softmax HopfieldCccpMap).
template <typename S>
std::optional<Summary> SolveFused(Context& context, const DeviceMap<S>& map, DeviceMatrix<S>& z,
                                  const typename PicardSolver<S>::Options& options, const std::string& name,
                                  DeviceLoop loop, std::string* why_not) {
  const auto* hopfield = dynamic_cast<const HopfieldCccpMap<S>*>(&map);
  if (hopfield == nullptr || hopfield->attention() != Attention::kSoftmax) return std::nullopt;  // (no fused loop for it)
  if (options.record_trace || options.callback) {
    *why_not = "a trace or callback needs the host in the loop";
    return std::nullopt;
  }
  if (z.rows() != map.dimension() || z.cols() < 1) {
    *why_not = "the batch does not fit the map";
    return std::nullopt;
  }
  const auto start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(map.dimension()), N = static_cast<int>(hopfield->num_patterns());
  const int batch = static_cast<int>(z.cols());
  internal::FusedPicardPlan plan;
  const char* reason = nullptr;
  const bool want_clusters = loop != DeviceLoop::kGridWhenPossible;
  const bool clusters = want_clusters && internal::PlanClusterHopfieldPicard<S>(n, N, batch, &plan, &reason);
  if (loop == DeviceLoop::kClustersOnCudaCores) plan.tensor_cores = false;
  // Why the cluster kernel was not used, for the message of whichever loop runs.
  const std::string no_clusters = want_clusters && !clusters
                                      ? std::string(" (no clusters: ") + (reason != nullptr ? reason : "") + ")"
                                      : std::string();
  if (!clusters && !internal::PlanFusedHopfieldPicard<S>(n, N, batch, &plan, &reason)) {
    *why_not = reason + no_clusters;
    return std::nullopt;
  }
  const internal::FusedPicardRules rules = implicit::internal::FusedRules<S>(options);
  internal::DeviceStaging staging(context, {internal::kSlotUpload, internal::kPinnedUpload, 16},
                                  {internal::kSlotDownload, internal::kPinnedDownload, 4 * static_cast<std::size_t>(batch)});
  void* workspace = context.Workspace(internal::kSlotFusedPicard, plan.workspace_bytes);
  if (clusters) {
    internal::ClusterHopfieldPicard<S>(context.stream(), plan, hopfield->patterns().data(), n, N, hopfield->beta(),
                                       z.data(), batch, rules, workspace, staging.results());
  } else {
    internal::FusedHopfieldPicard<S>(context.stream(), plan, hopfield->patterns().data(), n, N, hopfield->beta(),
                                     z.data(), batch, rules, workspace, staging.results());
  }
  Summary summary = FusedSummary(name, staging.Download(4 * static_cast<std::size_t>(batch)), batch, start,
                                 clusters ? kClusterLoopNote : kFusedLoopNote);
  summary.message += clusters && plan.tensor_cores ? std::string(" (tensor cores)") : no_clusters;
  return summary;
}

}  // namespace

// ---- DeviceSolver ---------------------------------------------------------------

template <typename Scalar>
Summary DeviceSolver<Scalar>::Solve(Context& context, const DeviceMap<Scalar>& map, MatrixRef<Scalar> z) const {
  DeviceMatrix<Scalar> device_z(context, z);
  Summary summary = Solve(context, map, device_z);
  device_z.CopyTo(context, z);
  return summary;
}

// ---- Picard -------------------------------------------------------------------------

template <typename Scalar>
DevicePicardSolver<Scalar>::DevicePicardSolver(const Options& options, DeviceLoop loop)
    : options_(options), loop_(loop) {
  std::string error;
  implicit::internal::ThrowIfInvalid("cuda picard", options_.IsValid(&error), error);
}

template <typename Scalar>
Summary DevicePicardSolver<Scalar>::Solve(Context& context, const DeviceMap<Scalar>& map,
                                          DeviceMatrix<Scalar>& z) const {
  std::string why_not;
  if (loop_ != DeviceLoop::kHostJudged) {
    if (std::optional<Summary> fused = SolveFused(context, map, z, options_, name(), loop_, &why_not)) {
      return *std::move(fused);
    }
  }
  DeviceSolve<Scalar> solve(context, map, z, options_, name());
  const Scalar damping = static_cast<Scalar>(options_.damping);
  auto& monitor = solve.monitor();
  solve.Evaluate(z.data(), monitor.active_columns(), solve.f(), solve.e());
  while (solve.Observe(z.data())) {
    const std::vector<Index>& active = monitor.active_columns();
    internal::DampedStep<Scalar>(solve.stream(), z.data(), solve.f(), static_cast<int>(z.rows()),
                                 solve.UploadColumns(active), static_cast<int>(active.size()), damping);
    solve.Evaluate(z.data(), active, solve.f(), solve.e());
  }
  Summary summary = solve.Finish(z.data());
  if (!why_not.empty()) summary.message += "; host-judged loop: " + why_not;
  return summary;
}

// ---- Anderson -----------------------------------------------------------------------

template <typename Scalar>
DeviceAndersonSolver<Scalar>::DeviceAndersonSolver(const Options& options) : options_(options) {
  std::string error;
  bool valid = options_.IsValid(&error);
  if (valid && options_.memory > kMaxDeviceAndersonMemory) {
    valid = false;
    error = "memory must be <= " + std::to_string(kMaxDeviceAndersonMemory) + " on the device, got " +
            std::to_string(options_.memory);
  }
  implicit::internal::ThrowIfInvalid("cuda anderson", valid, error);
}

template <typename Scalar>
Summary DeviceAndersonSolver<Scalar>::Solve(Context& context, const DeviceMap<Scalar>& map,
                                            DeviceMatrix<Scalar>& z) const {
  DeviceSolve<Scalar> solve(context, map, z, options_, name());
  auto& monitor = solve.monitor();
  const Index n = solve.n(), batch = solve.batch(), m = options_.memory;
  const int ni = static_cast<int>(n);
  const bool energy = solve.with_energy();
  const cudaStream_t stream = solve.stream();
  const implicit::internal::GuardRules rules{options_,
                                             static_cast<double>(std::numeric_limits<Scalar>::epsilon())};
  const double beta = options_.mixing, t = options_.backtrack_factor;

  // ---- device memory: the context's workspace (allocated on its first use) ----
  namespace k = internal;
  const std::size_t nb = static_cast<std::size_t>(n) * batch, b_count = batch;
  Scalar* q = Slot<Scalar>(context, k::kSlotQ, nb);
  Scalar* z_prev = Slot<Scalar>(context, k::kSlotZPrev, nb);
  Scalar* g_prev = Slot<Scalar>(context, k::kSlotGPrev, nb);
  Scalar* y = Slot<Scalar>(context, k::kSlotY, nb);
  Scalar* fy = Slot<Scalar>(context, k::kSlotFY, nb);
  Scalar* ey = Slot<Scalar>(context, k::kSlotEY, b_count);
  Scalar* dz = Slot<Scalar>(context, k::kSlotDZ, nb * m);
  Scalar* dg = Slot<Scalar>(context, k::kSlotDG, nb * m);
  double* gram = Slot<double>(context, k::kSlotGram, b_count * m * m);
  int* counters = Slot<int>(context, k::kSlotCounters, 4 * b_count);
  internal::CheckCall(cudaMemsetAsync(counters, 0, sizeof(int) * 4 * b_count, stream), "cudaMemset(anderson counters)");
  internal::CheckCall(cudaMemsetAsync(y, 0, sizeof(Scalar) * nb, stream), "cudaMemset(trial points)");
  internal::AndersonState state;
  state.memory = static_cast<int>(m);
  state.ridge = options_.ridge;
  state.condition_limit = options_.condition_limit;
  state.max_predicted_residual = options_.max_predicted_residual;
  state.fast_contraction = options_.fast_contraction;
  state.mixing = beta;
  state.count = counters;
  state.next = counters + batch;
  state.has_prev = counters + 2 * batch;
  state.fast_before = counters + 3 * batch;
  state.gram = gram;

  // ---- host per-sample state ----
  std::vector<char> proposal(batch, 0), accelerated(batch, 0);
  std::vector<double> descent(batch, 0.0), tau(batch, 0.0), sigma(batch, 1.0);
  std::vector<Index> pending, next, accepted, reset;
  std::vector<double> a, c;

  // Each observation downloads, with its scalars, the proposals q (one
  // block per sample, made for the samples active before it) and q . g.
  std::vector<Index> observed;
  const double* proposed = nullptr;
  auto propose = [&](const int* d_active, int count, double* out) {
    internal::AndersonPropose<Scalar>(stream, state, z.data(), solve.f(), z_prev, g_prev, dz, dg, q, ni, d_active,
                                      count, out);
    return 2 * static_cast<std::size_t>(count);
  };
  solve.Evaluate(z.data(), monitor.active_columns(), solve.f(), solve.e());
  while (solve.Observe(z.data(), propose, &proposed, &observed)) {
    const std::vector<Index>& active = monitor.active_columns();
    for (std::size_t j = 0; j < observed.size(); ++j) {
      proposal[observed[j]] = proposed[2 * j] != 0.0;
      descent[observed[j]] = proposed[2 * j + 1];
    }
    // The guarded step (internal::GuardedStepper::Step, with the state on the device).
    if (!solve.supports_subsets()) {
      internal::CheckCall(cudaMemcpyAsync(y, z.data(), sizeof(Scalar) * nb, cudaMemcpyDeviceToDevice, stream),
                          "copy z");
    }
    pending.clear();
    for (Index b : active) {
      accelerated[b] = 0;
      tau[b] = 0.0;
      if (proposal[b]) {
        if (!energy || descent[b] > 0.0) {
          tau[b] = 1.0;
        } else {
          monitor.CountFallback(b);  // not a descent direction
        }
      }
      sigma[b] = 1.0;
      pending.push_back(b);
    }
    while (!pending.empty()) {
      a.clear();
      c.clear();
      for (Index b : pending) {
        const double s = tau[b] == 0.0 ? sigma[b] : 1.0;
        a.push_back((1.0 - tau[b]) * s * beta);
        c.push_back(tau[b]);
      }
      const int p = static_cast<int>(pending.size());
      const int* d_pending = solve.UploadColumns(pending);
      internal::TrialPoints<Scalar>(stream, y, z.data(), solve.f(), q, ni, d_pending, solve.Upload(a.data(), a.size()),
                                    solve.Upload(c.data(), c.size()), p);
      solve.Evaluate(y, pending, d_pending, fy, ey);
      internal::TrialScalars<Scalar>(stream, y, fy, energy ? ey : nullptr, z.data(), solve.f(), ni, d_pending, p,
                                     solve.results());
      const double* trial = solve.Download(3 * static_cast<std::size_t>(p));
      next.clear();
      accepted.clear();
      for (int j = 0; j < p; ++j) {
        const Index b = pending[j];
        const bool safe = tau[b] == 0.0;
        const double e_x = solve.energy_of(b), e_y = trial[3 * j + 2];
        const bool ok = safe ? rules.AcceptSafe(energy, sigma[b], e_x, e_y)
                             : rules.AcceptTrial(energy, trial[3 * j], monitor.best_residual(b), e_x, e_y,
                                                 trial[3 * j + 1], solve.residual_of(b));
        if (ok) {
          if (!safe) {
            accelerated[b] = 1;
            monitor.CountAcceleratedStep(b);
          }
          accepted.push_back(b);
          continue;
        }
        monitor.CountBacktrack(b);
        if (safe) {
          sigma[b] *= t;
        } else {
          tau[b] *= t;
          if (tau[b] < rules.min_tau()) {
            tau[b] = 0.0;  // the safe step
            monitor.CountFallback(b);
          }
        }
        next.push_back(b);
      }
      const int* d_accepted = solve.UploadColumns(accepted);
      solve.CopyColumns(y, n, accepted, d_accepted, z.data());
      solve.CopyColumns(fy, n, accepted, d_accepted, solve.f());
      if (energy) solve.CopyColumns(ey, 1, accepted, d_accepted, solve.e());
      pending.swap(next);
    }
    // A proposal that was not taken clears the sample's history.
    reset.clear();
    for (Index b : active)
      if (proposal[b] && !accelerated[b]) reset.push_back(b);
    if (!reset.empty()) {
      internal::AndersonReset(stream, state, solve.UploadColumns(reset), static_cast<int>(reset.size()));
    }
  }
  return solve.Finish(z.data());
}

// ---- by name ------------------------------------------------------------------------

std::vector<std::string> DeviceSolverNames() { return {"picard", "anderson"}; }

template <typename Scalar>
std::unique_ptr<DeviceSolver<Scalar>> MakeDeviceSolver(const std::string& name,
                                                       const std::map<std::string, std::string>& options,
                                                       const SolverOptions& base) {
  // The registry parses and validates the options exactly as for the CPU solver.
  std::unique_ptr<Solver<Scalar>> host = MakeSolver<Scalar>(name, options, base);
  if (auto* picard = dynamic_cast<PicardSolver<Scalar>*>(host.get())) {
    return std::make_unique<DevicePicardSolver<Scalar>>(picard->options());
  }
  if (auto* anderson = dynamic_cast<AndersonSolver<Scalar>*>(host.get())) {
    return std::make_unique<DeviceAndersonSolver<Scalar>>(anderson->options());
  }
  throw std::invalid_argument("MakeDeviceSolver: solver '" + name +
                              "' has no device version (on the device: picard, anderson)");
}

template class DeviceSolver<float>;
template class DeviceSolver<double>;
template class DevicePicardSolver<float>;
template class DevicePicardSolver<double>;
template class DeviceAndersonSolver<float>;
template class DeviceAndersonSolver<double>;
template std::unique_ptr<DeviceSolver<float>> MakeDeviceSolver<float>(const std::string&,
                                                                      const std::map<std::string, std::string>&,
                                                                      const SolverOptions&);
template std::unique_ptr<DeviceSolver<double>> MakeDeviceSolver<double>(const std::string&,
                                                                        const std::map<std::string, std::string>&,
                                                                        const SolverOptions&);

}  // namespace cuda
}  // namespace implicit
