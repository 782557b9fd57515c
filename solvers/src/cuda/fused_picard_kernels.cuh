// The fused Picard loops of the softmax Hopfield map (implicit/solvers/internal/fused_picard.h): the
// whole solve in one kernel, every sample judged on the device. The kernels
// and the host code that lays out their memory; fused_picard.cu plans and
// launches them. Internal, for .cu files and for the kernels' CPU emulation
// (test/support/cuda_emulation.h), which defines the macros below first.
//
// Two kernels share the per-sample work below (PartialAttention, CombineParts
// and MergeParts, JudgeAndStep):
//
// FusedPicardKernel (cooperative; the grid). Block (c, g) of the grid owns the
// patterns of chunk c (in shared memory, pattern-major with a padded stride so
// that both a lane per pattern and a lane per coordinate read without bank
// conflicts) and the active positions k = g W + w, g W + w + G W, ... (W warps
// per block, G sample groups). Each iteration has three phases, the first two
// ending at grid-wide barriers:
//   A. per (chunk, active sample): the scores of the chunk's patterns (a lane
//      per pattern), their running max m and sum l of exp(s - m), and
//      y = sum exp(s - m) x (a lane per coordinate); a warp takes four
//      samples at once (independent chains, each pattern read once for four);
//   B. per active sample, one warp: f = sum_c y_c e^(m_c - M) / L with
//      L = sum_c l_c e^(m_c - M) (a lane per chunk for m and l), the
//      log-sum-exp M + log L, the energy, |f - z|, |f|, finiteness; the
//      judge's verdict; the damped step for the samples that go on;
//   C. every block compacts its own copy of the active list (the same in all).
// Data written during the kernel by other blocks is read with __ldcg (through
// L2, never a stale L1 line of another multiprocessor).
//
// ClusterPicardKernel (thread-block clusters, sm_90). The patterns are split
// over the C blocks of a cluster, and each cluster is a solver of its own: it
// keeps kClusterSlots samples in flight, takes the next batch column from a
// queue in global memory (one atomic) whenever one of its samples stops, and
// synchronises only its own blocks (cluster barriers, no grid-wide barrier).
// The chunks' partial results stay in each block's shared memory and the
// judges read them through distributed shared memory. When fewer samples are
// active than a block has warps, the warps split each block's chunk further
// (q sub-chunks per sample, combined in the block before the cluster barrier),
// so the last, slow samples of a batch still use every warp of their cluster.
// In double, while more samples are active than half the warps, phase A is a
// pair of small GEMMs per tile of kTensorTile patterns on the tensor cores
// (TensorPartialAttention: FP64 WMMA, 8 x 8 x 4), which reuse each value
// loaded from shared memory across a whole tile instead of four samples.
// (Written without a GPU at hand and checked under the CPU emulation; first run
// on a GPU, an H200, on 2026-11-29, where it became the default; docs/gpu.md.)
#pragma once

#include <implicit/core/cuda_kernel_support.cuh>
#include <implicit/solvers/internal/fused_picard.h>

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

// What differs between a CUDA compile and the CPU emulation: shared-memory
// declarations, and whether the cluster kernel's body is compiled (sm_90).
#ifndef IMPLICIT_DYNAMIC_SHARED
#define IMPLICIT_DYNAMIC_SHARED(name) extern __shared__ __align__(128) double name[]
#endif
#ifndef IMPLICIT_SHARED_ARRAY
#define IMPLICIT_SHARED_ARRAY(type, name, count) __shared__ type name[count]
#endif
#ifndef IMPLICIT_HAS_CLUSTERS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define IMPLICIT_HAS_CLUSTERS 1
#else
#define IMPLICIT_HAS_CLUSTERS 0
#endif
#endif
// The clock of the cluster kernel's phase probe (nanoseconds).
#ifndef IMPLICIT_GLOBAL_TIMER
#define IMPLICIT_GLOBAL_TIMER() ::implicit::cuda::internal::GlobalTimer()
#endif
#ifdef __CUDACC__
#include <mma.h>  // the cluster kernel's tensor-core phase A (WMMA, double, m8n8k4)
#endif

namespace implicit {
namespace cuda {
namespace internal {
namespace {


namespace cg = cooperative_groups;

__device__ inline long long GlobalTimer() {
#ifdef __CUDA_ARCH__
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<long long>(t);
#else
  return 0;
#endif
}

constexpr int kFusedThreads = 512;
constexpr int kFusedWarps = kFusedThreads / kWarp;
constexpr int kMaxPerLane = 8;       // coordinates per lane: n <= 256
constexpr int kSamplesPerWarp = 4;   // samples a warp takes at once in phase A
constexpr int kTargetChunk = 64;     // patterns per block, before the grid is filled (measured: 32, 64, 128)
constexpr int kTensorTile = 48;      // the most patterns per tile of the tensor-core phase A (a multiple of 8)
constexpr int kTileStride = kTensorTile + 4;  // the row stride of its tile of scores
static_assert(kClusterSlots == kFusedWarps * kSamplesPerWarp, "a cluster's slots fill its warps' phase A");
constexpr unsigned kFull = 0xffffffffu;

// Per-sample judge state (indexed by batch column).
struct JudgeState {
  double *record_residual, *record_energy, *kept_residual, *relative, *initial_residual;
  int* stall;
  int* flags;      // grid kernel: flags[k], active position k goes on
  int* lists;      // grid kernel: per block, two lists of B (its own copy of the active list)
  int* iteration;  // cluster kernel: per column, the sample's observation count
};

// What both kernels read: the problem, the rules and where the results go.
template <typename S>
struct SolveArgs {
  const S* patterns;
  int n, N, batch;
  S beta;
  S* z;
  S* kept;  // n x batch: each sample's kept iterate
  FusedPicardRules rules;
  JudgeState st;
  double* results;
};
template <typename S>
struct FusedArgs : SolveArgs<S> {
  S* partials;  // chunks x batch entries (GridPartLayout): the part of (chunk, active position)
  int chunks, groups, chunk;
};
template <typename S>
struct ClusterArgs : SolveArgs<S> {
  int cluster, chunk, slots;  // blocks per cluster, patterns per block, samples in flight (<= kClusterSlots)
  int* queue;                 // the next batch column to hand out
  bool tensor_cores;          // phase A on the tensor cores (double) while more than kFusedWarps / 2 samples are active
  long long* probe;           // the phase probe's record (cuda_kernels.h, kProbeFields), or nullptr
  int probe_iterations;       // its capacity
};

// Where a part (m, l and y of one chunk for one sample) lies in its entry:
// y[i] at entry[y + i], m and l at entry[head] and entry[head + 1].
struct PartLayout {
  int stride, y, head;
};
// The grid kernel's entries (in global memory): m, l, then y.
__host__ __device__ inline PartLayout GridPartLayout(int n) { return {n + 2, 2, 0}; }

// The cluster kernel's dynamic shared memory per block (in elements, each
// array 32-byte aligned, as the tensor cores' loads need): the block's
// patterns (rows x ld, pattern-major; rows and columns beyond the chunk are
// zero), kClusterSlots part entries of ld (y, then at n_pad: m, l and a flag
// set when a score was NaN), and a work area: for the tensor-core phase A the
// positions' z (kClusterSlots x ld) and one tile of scores (kClusterSlots x
// kTileStride, sample-major), for the other the warps' buffers.
struct ClusterLayout {
  int n_pad, ld, rows;
  __host__ __device__ ClusterLayout(int n, int chunk)
      : n_pad((n + 7) / 8 * 8), ld(n_pad + 4), rows((chunk + 7) / 8 * 8) {}
  __host__ __device__ std::size_t PartsAt() const { return static_cast<std::size_t>(rows) * ld; }
  __host__ __device__ std::size_t WorkAt() const { return PartsAt() + static_cast<std::size_t>(kClusterSlots) * ld; }
  __host__ __device__ std::size_t Elements() const {
    return WorkAt() + static_cast<std::size_t>(kClusterSlots) * (ld + kTileStride);
  }
  __host__ __device__ PartLayout Parts() const { return {ld, 0, n_pad}; }
};

// A workspace carved into arrays, 256-byte aligned (base == nullptr: sizes only).
class Carver {
 public:
  explicit Carver(unsigned char* base) : base_(base) {}
  template <typename T>
  T* Take(std::size_t count) {
    unsigned char* p = base_ == nullptr ? nullptr : base_ + at_;
    at_ += (sizeof(T) * count + 255) / 256 * 256;
    return reinterpret_cast<T*>(p);
  }
  std::size_t size() const { return at_; }

 private:
  unsigned char* base_;
  std::size_t at_ = 0;
};

// The arrays both kernels keep per sample.
template <typename S>
void CarveSamples(Carver* w, int n, int batch, SolveArgs<S>* a) {
  const std::size_t b = static_cast<std::size_t>(batch);
  a->kept = w->Take<S>(n * b);
  a->st.record_residual = w->Take<double>(b);
  a->st.record_energy = w->Take<double>(b);
  a->st.kept_residual = w->Take<double>(b);
  a->st.relative = w->Take<double>(b);
  a->st.initial_residual = w->Take<double>(b);
  a->st.stall = w->Take<int>(b);
}
template <typename S>
std::size_t Carve(unsigned char* base, int n, int batch, int chunks, int blocks, FusedArgs<S>* a) {
  Carver w(base);
  CarveSamples<S>(&w, n, batch, a);
  a->partials = w.Take<S>(static_cast<std::size_t>(chunks) * batch * GridPartLayout(n).stride);
  a->st.flags = w.Take<int>(batch);
  a->st.lists = w.Take<int>(2 * static_cast<std::size_t>(batch) * blocks);
  return w.size();
}
template <typename S>
std::size_t Carve(unsigned char* base, int n, int batch, ClusterArgs<S>* a) {
  Carver w(base);
  CarveSamples<S>(&w, n, batch, a);
  a->st.iteration = w.Take<int>(batch);
  a->queue = w.Take<int>(1);
  return w.size();
}

// A sample's judge state before its first observation.
__device__ inline void ResetRecord(const JudgeState& st, int column) {
  st.record_residual[column] = st.record_energy[column] = st.kept_residual[column] = st.relative[column] = INFINITY;
  st.initial_residual[column] = 0;
  st.stall[column] = 0;
}

// Reductions over aligned groups of `Width` lanes (every lane of the warp
// takes part), the result in every lane of the group.
template <typename S, int Width = kWarp>
__device__ inline S WarpAllMax(S v) {  // NaN ignored
  for (int o = Width / 2; o > 0; o /= 2) {
    const S other = __shfl_xor_sync(kFull, v, o);
    v = other > v ? other : v;
  }
  return v;
}
template <typename T, int Width = kWarp>
__device__ inline T WarpAllSum(T v) {  // butterfly: bitwise the same in every lane
  for (int o = Width / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Writes a part (m, l, y; m NaN when a score was) into the entry at out, one warp.
template <typename S, int R>
__device__ void StorePart(S* out, const PartLayout& layout, int n, S m, S l, const S* y, bool nan) {
  const int lane = threadIdx.x % kWarp;
  if (lane == 0) {
    out[layout.head] = nan ? S(NAN) : m;
    out[layout.head + 1] = l;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    if (i < n) out[layout.y + i] = y[r];
  }
}

// Phase A for up to kSamplesPerWarp samples (batch columns cols[0..count))
// and the `patterns` patterns at xs (row stride `stride`), one warp: a lane per
// pattern for the scores, a lane per coordinate for y, the samples side by
// side (independent chains). Writes sample s's part into the entry outs[s].
template <typename S, int R>
__device__ void PartialAttention(const SolveArgs<S>& a, const S* xs, int stride, int patterns, S* zbuf, S* wbuf,
                                 const int* cols, S* const* outs, const PartLayout& layout, int count) {
  constexpr int K = kSamplesPerWarp;
  const int lane = threadIdx.x % kWarp, n = a.n;
  for (int idx = lane; idx < n * K; idx += kWarp) {  // zbuf[i K + s] = z_s[i]
    const int i = idx / K, s = idx % K;
    zbuf[idx] = s < count ? __ldcg(a.z + static_cast<std::size_t>(cols[s]) * n + i) : S(0);
  }
  __syncwarp();
  S m[K], l[K], y[K][R];
  bool nan[K];
#pragma unroll
  for (int s = 0; s < K; ++s) {
    m[s] = S(-INFINITY);
    l[s] = 0;
    nan[s] = false;
#pragma unroll
    for (int r = 0; r < R; ++r) y[s][r] = 0;
  }
  for (int t0 = 0; t0 < patterns; t0 += kWarp) {
    const int q = t0 + lane;
    const bool valid = q < patterns;
    S acc[K];
#pragma unroll
    for (int s = 0; s < K; ++s) acc[s] = 0;
    if (valid) {
      const S* x = xs + static_cast<std::size_t>(q) * stride;
#pragma unroll 4
      for (int i = 0; i < n; ++i) {  // (unrolled: the shared-memory loads of later steps are issued early)
        const S xv = x[i];
        const S* zi = zbuf + i * K;
#pragma unroll
        for (int s = 0; s < K; ++s) acc[s] += xv * zi[s];
      }
    }
    S w[K];
#pragma unroll
    for (int s = 0; s < K; ++s) {
      w[s] = 0;
      if (s >= count) continue;  // an empty slot (the same in every lane): no reductions
      S v = valid ? a.beta * acc[s] : S(-INFINITY);
      if (v != v) {
        nan[s] = true;
        v = S(-INFINITY);
      }
      const S tile_max = WarpAllMax(v);
      const S m_new = tile_max > m[s] ? tile_max : m[s];
      if (m_new == S(-INFINITY)) continue;  // no finite score yet (the same in every lane)
      const S scale = m[s] == S(-INFINITY) ? S(0) : exp(m[s] - m_new);
      w[s] = exp(v - m_new);
      l[s] = l[s] * scale + WarpAllSum(w[s]);
#pragma unroll
      for (int r = 0; r < R; ++r) y[s][r] *= scale;
      m[s] = m_new;
    }
#pragma unroll
    for (int s = 0; s < K; ++s) wbuf[lane * K + s] = w[s];
    __syncwarp();
    const int tile = patterns - t0 < kWarp ? patterns - t0 : kWarp;
#pragma unroll 4
    for (int j = 0; j < tile; ++j) {
      const S* x = xs + static_cast<std::size_t>(t0 + j) * stride;
      S xv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = lane + r * kWarp;
        xv[r] = i < n ? x[i] : S(0);
      }
      const S* wj = wbuf + j * K;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        if (s >= count) continue;
        const S ws = wj[s];
#pragma unroll
        for (int r = 0; r < R; ++r) y[s][r] += ws * xv[r];
      }
    }
    __syncwarp();  // wbuf is the next tile's
  }
#pragma unroll
  for (int s = 0; s < K; ++s) {
    const bool any_nan = __any_sync(kFull, nan[s]);
    if (s >= count) continue;
    StorePart<S, R>(outs[s], layout, n, m[s], l[s], y[s], any_nan);
  }
  __syncwarp();  // zbuf is the next samples'
}

// The parts of one sample, as CombineParts reads them: Entry(c) is part c's
// entry (laid out as `layout`), Read one of its values.
template <typename S>
struct GridParts {  // the grid kernel's: in global memory, written by other blocks
  const S* first;
  std::size_t stride;
  PartLayout layout;
  __device__ const S* Entry(int c) const { return first + c * stride; }
  __device__ S Read(const S* p) const { return __ldcg(p); }
};
template <typename S>
struct BlockParts {  // consecutive entries of this block's shared memory
  const S* first;
  PartLayout layout;
  __device__ const S* Entry(int c) const { return first + static_cast<std::size_t>(c) * layout.stride; }
  __device__ S Read(const S* p) const { return *p; }
};
#if IMPLICIT_HAS_CLUSTERS
template <typename S>
struct ClusterParts {  // entry `entry` of every block of the cluster (part c: block c)
  S* partials;         // this block's array (the same offset in every block)
  int entry;
  PartLayout layout;
  __device__ const S* Entry(int c) const {
    return cg::this_cluster().map_shared_rank(partials + static_cast<std::size_t>(entry) * layout.stride,
                                              static_cast<unsigned>(c));
  }
  __device__ S Read(const S* p) const { return *p; }
};
#endif

// `count` parts of one sample combined, one warp (a lane per part for m and
// l): M = max_c m_c, L = sum_c l_c e^(m_c - M), y = sum_c y_c e^(m_c - M)
// (y[r]: coordinate lane + 32 r); *nan: a part saw a NaN score.
template <typename S, int R, typename Parts>
__device__ void CombineParts(const Parts& parts, int count, int n, S* M_out, S* L_out, S* y, bool* any_nan) {
  const int lane = threadIdx.x % kWarp, head = parts.layout.head, y0 = parts.layout.y;
  S M = S(-INFINITY), m_lane[2] = {S(-INFINITY), S(-INFINITY)}, l_lane[2] = {0, 0};
  bool nan = false;
  for (int c = lane, pass = 0; c < count; c += kWarp, ++pass) {
    const S* e = parts.Entry(c);
    const S mc = parts.Read(e + head), lc = parts.Read(e + head + 1);
    if (pass == 0) m_lane[0] = mc, l_lane[0] = lc;  // kept for the weights below
    if (pass == 1) m_lane[1] = mc, l_lane[1] = lc;
    if (mc != mc) nan = true;
    else if (mc > M) M = mc;
  }
  M = WarpAllMax(M);
  nan = __any_sync(kFull, nan);
  S L = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) y[r] = 0;
  for (int base = 0; base < count; base += kWarp) {
    S w = 0;  // lane c's part weight e^(m_c - M) (0: empty or NaN)
    if (base + lane < count) {
      const int c = base + lane, pass = base / kWarp;
      const S mc = pass == 0 ? m_lane[0] : pass == 1 ? m_lane[1] : parts.Read(parts.Entry(c) + head);
      if (mc > S(-INFINITY)) {
        w = exp(mc - M);
        L += w * (pass == 0 ? l_lane[0] : pass == 1 ? l_lane[1] : parts.Read(parts.Entry(c) + head + 1));
      }
    }
    const int span = count - base < kWarp ? count - base : kWarp;
#pragma unroll 8
    for (int j = 0; j < span; ++j) {  // (unrolled: several parts' loads in flight)
      const S wj = __shfl_sync(kFull, w, j);
      const S* e = parts.Entry(base + j) + y0;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = lane + r * kWarp;
        if (i < n) y[r] += wj * parts.Read(e + i);
      }
    }
  }
  *M_out = M;
  *L_out = WarpAllSum(L);
  *any_nan = nan;
}

// Phase B's merge for one sample: f = y / L of the combined parts and the
// log-sum-exp M + log L (NaN when a part saw a NaN score).
template <typename S, int R, typename Parts>
__device__ void MergeParts(const Parts& parts, int count, int n, S* f, S* lse) {
  S M, L;
  bool nan;
  CombineParts<S, R>(parts, count, n, &M, &L, f, &nan);
#pragma unroll
  for (int r = 0; r < R; ++r) f[r] = nan ? S(NAN) : f[r] / L;
  *lse = nan ? S(NAN) : static_cast<S>(M + log(L));
}

// A sample's judge state before an observation (loaded early: the loads
// overlap the merge's).
struct Record {
  double initial, residual, energy, kept_residual, relative;
  int stall;
};
__device__ inline Record LoadRecord(const JudgeState& st, int column) {
  return {__ldcg(st.initial_residual + column), __ldcg(st.record_residual + column),
          __ldcg(st.record_energy + column),    __ldcg(st.kept_residual + column),
          __ldcg(st.relative + column),         __ldcg(st.stall + column)};
}
template <typename S, int R>
__device__ void LoadColumn(const S* column, int n, S* v) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    v[r] = i < n ? __ldcg(column + i) : S(0);
  }
}

// Phase B's verdict for one sample (batch column `column`, observation t,
// iterate zv, map value f, log-sum-exp lse), one warp: SampleJudge::Judge's
// forward rules, then the iteration budget; the judge state, the kept
// iterate, the damped step or the restored kept iterate, and the sample's
// results when it stops. Returns the FusedStop (kFusedRunning: goes on), the
// same in every lane.
template <typename S, int R>
__device__ int JudgeAndStep(const SolveArgs<S>& a, int column, int t, const Record& rec, const S* zv, const S* f,
                            S lse) {
  const int lane = threadIdx.x % kWarp, n = a.n;
  const JudgeState& st = a.st;
  double r2 = 0, f2 = 0, z2 = 0;
  int finite = 1;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    if (i >= n) continue;
    const double d = double(f[r]) - double(zv[r]);
    r2 += d * d;
    f2 += double(f[r]) * double(f[r]);
    z2 += double(zv[r]) * double(zv[r]);
    if (!isfinite(zv[r]) || !isfinite(f[r])) finite = 0;
  }
  r2 = WarpAllSum(r2);
  f2 = WarpAllSum(f2);
  z2 = WarpAllSum(z2);
  finite = __all_sync(kFull, finite);
  const double r = sqrt(r2), scale = sqrt(f2);
  const double e = static_cast<S>(0.5 * z2 - double(lse) / double(a.beta));

  // The judge (every lane alike; lane 0 writes the state): the CPU monitor's
  // rule (JudgeFiniteSample, sample_rule.h) on the sample's records.
  const FusedPicardRules& rules = a.rules;
  const bool first = t == 0;
  const double relative = scale > 0 ? r / scale : r;
  double kept_residual = rec.kept_residual, relative_out = rec.relative;
  int stop = kFusedRunning;
  bool keep = false;
  if (!isfinite(r) || !isfinite(scale) || !finite || (rules.use_energy && !isfinite(e))) {
    stop = kFusedNonFinite;
  } else {
    implicit::internal::SampleRecord record;
    record.best_residual = rec.residual;
    record.best_energy = rec.energy;
    record.initial_residual = rec.initial;
    record.stall = rec.stall;
    const int verdict = implicit::internal::JudgeFiniteSample(rules.limits, &record, r, scale, rules.use_energy, e,
                                                             first, /*exempt=*/false, &keep);
    if (keep) {
      kept_residual = r;
      relative_out = relative;
    }
    if (verdict == implicit::internal::kSampleConverged) {
      relative_out = relative;
      stop = kFusedConverged;
    } else if (verdict == implicit::internal::kSampleDiverged) {
      stop = kFusedDiverged;
    } else if (verdict == implicit::internal::kSampleStalled) {
      stop = kFusedStalled;
    } else if (t >= rules.max_iterations) {
      stop = kFusedMaxIterations;
    }
    if (lane == 0) {
      st.initial_residual[column] = record.initial_residual;
      st.record_residual[column] = record.best_residual;
      st.record_energy[column] = record.best_energy;
      st.kept_residual[column] = kept_residual;
      st.relative[column] = relative_out;
      st.stall[column] = record.stall;
    }
  }
  S* zc = a.z + static_cast<std::size_t>(column) * n;
  S* kc = a.kept + static_cast<std::size_t>(column) * n;
  const bool restore = stop != kFusedRunning && stop != kFusedConverged && isfinite(kept_residual);
#pragma unroll
  for (int q = 0; q < R; ++q) {
    const int i = lane + q * kWarp;
    if (i >= n) continue;
    if (keep) kc[i] = zv[q];
    if (stop == kFusedRunning) {
      zc[i] = zv[q] + static_cast<S>(rules.damping) * (f[q] - zv[q]);
    } else if (restore && !keep) {
      zc[i] = __ldcg(kc + i);  // the kept iterate (written by this lane, or at an earlier observation)
    }
  }
  if (lane == 0 && stop != kFusedRunning) {
    double* out = a.results + 4 * static_cast<std::size_t>(column);
    out[0] = stop;
    out[1] = t;
    out[2] = restore ? kept_residual : r;
    out[3] = relative_out;
  }
  return stop;
}

// ---- the grid kernel ------------------------------------------------------------------

// Phase C, in every block alike (the block's own copy of the list): next =
// the entries of list whose flag is set, in order. Returns their number.
__device__ int Compact(const int* flags, const int* list, int count, int* next) {
  IMPLICIT_SHARED_ARRAY(int, sums, kFusedThreads);
  const int tid = threadIdx.x, per = (count + kFusedThreads - 1) / kFusedThreads;
  const int lo = tid * per < count ? tid * per : count, hi = lo + per < count ? lo + per : count;
  int mine = 0;
  for (int k = lo; k < hi; ++k) mine += __ldcg(flags + k);
  sums[tid] = mine;
  __syncthreads();
  for (int offset = 1; offset < kFusedThreads; offset *= 2) {  // inclusive scan
    const int v = tid >= offset ? sums[tid - offset] : 0;
    __syncthreads();
    sums[tid] += v;
    __syncthreads();
  }
  int at = sums[tid] - mine;
  for (int k = lo; k < hi; ++k)
    if (__ldcg(flags + k)) next[at++] = __ldcg(list + k);
  const int total = sums[kFusedThreads - 1];
  __syncthreads();  // the list is complete, and sums free, before anyone goes on
  return total;
}

// Phase B for active position k (batch column `column`) at observation t:
// merges the chunks, judges and steps the sample; flags[k] = goes on.
template <typename S, int R>
__device__ void JudgeSample(const FusedArgs<S>& a, int k, int column, int t) {
  const Record rec = LoadRecord(a.st, column);
  S zv[R], f[R], lse;
  LoadColumn<S, R>(a.z + static_cast<std::size_t>(column) * a.n, a.n, zv);
  const PartLayout layout = GridPartLayout(a.n);
  const GridParts<S> parts{a.partials + static_cast<std::size_t>(k) * layout.stride,
                           static_cast<std::size_t>(a.batch) * layout.stride, layout};
  MergeParts<S, R>(parts, a.chunks, a.n, f, &lse);
  const int stop = JudgeAndStep<S, R>(a, column, t, rec, zv, f, lse);
  if (threadIdx.x % kWarp == 0) a.st.flags[k] = stop == kFusedRunning;
}

// The whole solve. Shared memory: the chunk's patterns, then per warp the
// z of its samples and their weights of one tile.
template <typename S, int R>
__global__ void __launch_bounds__(kFusedThreads, 1) FusedPicardKernel(FusedArgs<S> a) {
  constexpr int K = kSamplesPerWarp;
  cg::grid_group grid = cg::this_grid();
  IMPLICIT_DYNAMIC_SHARED(shared_raw);
  const int n = a.n, warp = threadIdx.x / kWarp;
  const int c = blockIdx.x % a.chunks, g = blockIdx.x / a.chunks;
  const int c0 = c * a.chunk, c1 = c0 + a.chunk < a.N ? c0 + a.chunk : a.N;
  S* xs = reinterpret_cast<S*>(shared_raw);
  S* zbuf = xs + static_cast<std::size_t>(a.chunk) * (n + 1) + static_cast<std::size_t>(warp) * K * (n + kWarp);
  S* wbuf = zbuf + static_cast<std::size_t>(K) * n;
  for (int idx = threadIdx.x; idx < (c1 - c0) * n; idx += blockDim.x) {
    const int q = idx / n, i = idx % n;
    xs[q * (n + 1) + i] = a.patterns[static_cast<std::size_t>(c0 + q) * n + i];
  }
  int* lists = a.st.lists + static_cast<std::size_t>(blockIdx.x) * 2 * a.batch;  // this block's two
  for (int b = threadIdx.x; b < a.batch; b += blockDim.x) lists[b] = b;
  const int global = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
  for (int b = global; b < a.batch; b += threads) ResetRecord(a.st, b);
  __syncthreads();
  grid.sync();
  const int group_warp = g * kFusedWarps + warp, group_stride = a.groups * kFusedWarps;
  const int grid_warp = blockIdx.x * kFusedWarps + warp, grid_warps = gridDim.x * kFusedWarps;
  int count = a.batch;
  for (int t = 0; count > 0; ++t) {
    const int* list = lists + (t & 1) * a.batch;
    for (int k0 = group_warp; k0 < count; k0 += K * group_stride) {
      int cols[K], taken = 0;
      S* outs[K];
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const int k = k0 + s * group_stride;
        cols[s] = 0;
        outs[s] = a.partials + (static_cast<std::size_t>(c) * a.batch + k) * GridPartLayout(n).stride;
        if (k < count) {
          cols[s] = __ldcg(list + k);
          taken = s + 1;
        }
      }
      PartialAttention<S, R>(a, xs, n + 1, c1 - c0, zbuf, wbuf, cols, outs, GridPartLayout(n), taken);
    }
    grid.sync();
    for (int k = grid_warp; k < count; k += grid_warps) JudgeSample<S, R>(a, k, __ldcg(list + k), t);
    grid.sync();
    count = Compact(a.st.flags, list, count, lists + ((t + 1) & 1) * a.batch);
  }
}

// ---- the cluster kernel ---------------------------------------------------------------

#if IMPLICIT_HAS_CLUSTERS
// Writes slot p's batch column (-1: empty) into every block of the cluster.
__device__ inline void SetSlot(int* slot_column, int p, int column, int blocks) {
  cg::cluster_group cluster = cg::this_cluster();
  for (int r = 0; r < blocks; ++r) *cluster.map_shared_rank(slot_column + p, static_cast<unsigned>(r)) = column;
}

// Phase A of the cluster kernel on the tensor cores (double; every warp of
// the block): the parts of the block's `span` patterns (xs, laid out as g)
// for the active positions j < count (batch column slot_column[active[j]])
// into the part entries j, as PartialAttention computes them, by tiles of
// kTensorTile patterns as the online softmax does: (1) the scores of the tile,
// a GEMM on 8 x 8 x 4 tiles (patterns x positions x coordinates); (2) per
// position, a group of eight threads: the running max m and sum l, the
// weights e^(s - m) in place of the scores, and y rescaled to the new max; (3) y += the tile's
// patterns times the weights, a GEMM accumulating in the part entries.
__device__ inline void TensorPartialAttention(const SolveArgs<double>& a, const ClusterLayout& g, const double* xs,
                                              int span, double* parts, double* work, const int* slot_column,
                                              const int* active, int count) {
  namespace wmma = nvcuda::wmma;
  const int n = a.n, ld = g.ld, head = g.n_pad, tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarp, threads = static_cast<int>(blockDim.x);
  const int positions = (count + 7) / 8 * 8, coordinates = (n + 3) / 4 * 4;  // padded: whole tiles and k-steps
  double* zs = work;                                                        // positions x ld: z (zero-padded)
  double* st = work + static_cast<std::size_t>(kClusterSlots) * ld;         // positions x kTileStride
  for (int idx = tid; idx < positions * ld; idx += threads) {
    const int j = idx / ld, i = idx % ld;
    zs[idx] = j < count && i < n ? __ldcg(a.z + static_cast<std::size_t>(slot_column[active[j]]) * n + i) : 0.0;
    parts[idx] = i == head ? -INFINITY : 0.0;  // y = 0, m = -inf, l = 0, no NaN
  }
  __syncthreads();
  // As few tiles as kTensorTile allows, of even sizes (multiples of 8: whole WMMA tiles of patterns).
  const int tiles = (span + kTensorTile - 1) / kTensorTile;
  const int size = tiles > 0 ? ((span + tiles - 1) / tiles + 7) / 8 * 8 : kTensorTile;
  for (int p0 = 0; p0 < span; p0 += size) {
    const int tile = span - p0 < size ? span - p0 : size;
    const int row_tiles = (tile + 7) / 8, k_patterns = (tile + 3) / 4 * 4;
    // (1) st[j][p] = x_(p0 + p) . z_j
    for (int t = warp; t < row_tiles * (positions / 8); t += kFusedWarps) {
      const int pm = t % row_tiles, jn = t / row_tiles;
      wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
      wmma::fill_fragment(acc, 0.0);
      for (int k0 = 0; k0 < coordinates; k0 += 4) {
        wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> x;
        wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> z;
        wmma::load_matrix_sync(x, xs + static_cast<std::size_t>(p0 + 8 * pm) * ld + k0, ld);
        wmma::load_matrix_sync(z, zs + static_cast<std::size_t>(8 * jn) * ld + k0, ld);
        wmma::mma_sync(acc, x, z, acc);
      }
      wmma::store_matrix_sync(st + static_cast<std::size_t>(8 * jn) * kTileStride + 8 * pm, acc, kTileStride,
                              wmma::mem_col_major);
    }
    __syncthreads();
    // (2) the online softmax: position j by the kGroup threads of group j (every
    // position at once; a warp holds kWarp / kGroup of them), pattern p of the
    // tile by thread p % kGroup of the group.
    {
      constexpr int kGroup = kFusedThreads / kClusterSlots, kPer = kTensorTile / kGroup;
      static_assert(kGroup * kPer == kTensorTile && kWarp % kGroup == 0, "groups of lanes tile the patterns");
      const int j = tid / kGroup, part = tid % kGroup;
      double* entry = parts + static_cast<std::size_t>(j) * ld;
      double* w_row = st + static_cast<std::size_t>(j) * kTileStride;
      double v[kPer], local_max = -INFINITY;
      int nan = 0;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int p = part + u * kGroup;
        v[u] = j < count && p < tile ? a.beta * w_row[p] : -INFINITY;
        if (v[u] != v[u]) {
          nan = 1;
          v[u] = -INFINITY;
        }
        local_max = v[u] > local_max ? v[u] : local_max;
      }
      const double m = entry[head], tile_max = WarpAllMax<double, kGroup>(local_max);
      const double m_new = tile_max > m ? tile_max : m;
      nan = WarpAllSum<int, kGroup>(nan);
      double w[kPer], sum = 0, scale = 1;
#pragma unroll
      for (int u = 0; u < kPer; ++u) w[u] = 0;
      if (m_new > -INFINITY) {  // else no finite score yet: nothing changes
        scale = m == -INFINITY ? 0.0 : exp(m - m_new);
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
          w[u] = exp(v[u] - m_new);
          sum += w[u];
        }
      }
      sum = WarpAllSum<double, kGroup>(sum);
      if (j < count) {
#pragma unroll
        for (int u = 0; u < kPer; ++u) w_row[part + u * kGroup] = w[u];
        for (int i = part; i < n; i += kGroup) entry[i] *= scale;
        if (part == 0) {
          entry[head] = m_new;
          entry[head + 1] = entry[head + 1] * scale + sum;
          if (nan != 0) entry[head + 2] = 1;
        }
      }
    }
    __syncthreads();
    // (3) y_j += sum_p w[j][p] x_(p0 + p), 8 coordinates x 8 positions a tile
    const int coordinate_tiles = g.n_pad / 8;
    for (int t = warp; t < coordinate_tiles * (positions / 8); t += kFusedWarps) {
      const int im = t % coordinate_tiles, jn = t / coordinate_tiles;
      double* y = parts + static_cast<std::size_t>(8 * jn) * ld + 8 * im;
      wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
      wmma::load_matrix_sync(acc, y, ld, wmma::mem_col_major);
      for (int k0 = 0; k0 < k_patterns; k0 += 4) {
        wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::col_major> x;
        wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> w;
        wmma::load_matrix_sync(x, xs + static_cast<std::size_t>(p0 + k0) * ld + 8 * im, ld);
        wmma::load_matrix_sync(w, st + static_cast<std::size_t>(8 * jn) * kTileStride + k0, kTileStride);
        wmma::mma_sync(acc, x, w, acc);
      }
      wmma::store_matrix_sync(y, acc, ld, wmma::mem_col_major);
    }
    __syncthreads();  // st is the next tile's
  }
  for (int j = tid; j < count; j += threads) {
    double* entry = parts + static_cast<std::size_t>(j) * ld;
    if (entry[head + 2] != 0) entry[head] = NAN;
  }
}
#endif

// The next batch column from the queue, its judge state reset (-1: none left).
template <typename S>
__device__ int TakeColumn(const ClusterArgs<S>& a) {
  const int column = atomicAdd(a.queue, 1);
  if (column >= a.batch) return -1;
  ResetRecord(a.st, column);
  a.st.iteration[column] = 0;
  return column;
}

// The whole solve, per cluster. Shared memory: dynamic as ClusterLayout;
// static, the slot table and the active positions.
template <typename S, int R>
__global__ void __launch_bounds__(kFusedThreads, 1) ClusterPicardKernel(ClusterArgs<S> a) {
#if IMPLICIT_HAS_CLUSTERS
  constexpr int K = kSamplesPerWarp, P = kClusterSlots;
  IMPLICIT_SHARED_ARRAY(int, slot_column, P);   // each slot's batch column (-1: empty); the same in every block
  IMPLICIT_SHARED_ARRAY(int, active, P);        // the slots in use, in order
  IMPLICIT_SHARED_ARRAY(int, active_count, 1);  // their number
  cg::cluster_group cluster = cg::this_cluster();
  IMPLICIT_DYNAMIC_SHARED(shared_raw);
  const int n = a.n, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int rank = static_cast<int>(cluster.block_rank()), blocks = a.cluster;
  const int c0 = min(rank * a.chunk, a.N), c1 = min(c0 + a.chunk, a.N), span = c1 - c0;
  const ClusterLayout g(n, a.chunk);
  const PartLayout layout = g.Parts();
  S* xs = reinterpret_cast<S*>(shared_raw);
  S* partials = xs + g.PartsAt();
  S* work = xs + g.WorkAt();
  S* zbuf = work + static_cast<std::size_t>(warp) * K * (n + kWarp);  // the warps' buffers (PartialAttention)
  S* wbuf = zbuf + static_cast<std::size_t>(K) * n;
  for (int idx = threadIdx.x; idx < g.rows * g.ld; idx += blockDim.x) {  // zero beyond the chunk
    const int q = idx / g.ld, i = idx % g.ld;
    xs[idx] = q < span && i < n ? a.patterns[static_cast<std::size_t>(c0 + q) * n + i] : S(0);
  }
  cluster.sync();  // every block of the cluster runs: its shared memory may be written
  const int tid = static_cast<int>(threadIdx.x);
  if (rank == 0 && tid < P) SetSlot(slot_column, tid, tid < a.slots ? TakeColumn(a) : -1, blocks);
  cluster.sync();
  const bool probing = a.probe != nullptr && blockIdx.x == 0 && tid == 0;  // cluster 0's first block
  for (int iteration = 0;; ++iteration) {
    if (warp == 0) {  // the active positions, the same list in every block
      int total = 0;
      for (int base = 0; base < P; base += kWarp) {
        const bool on = slot_column[base + lane] >= 0;
        const unsigned mask = __ballot_sync(kFull, on);
        if (on) active[total + __popc(mask & ((1u << lane) - 1u))] = base + lane;
        total += __popc(mask);
      }
      if (lane == 0) active_count[0] = total;
    }
    __syncthreads();
    const int count = active_count[0];
    if (count == 0) break;  // (the same in every block: no block waits at a barrier alone)
    long long* stamps = probing && iteration < a.probe_iterations
                            ? a.probe + static_cast<std::size_t>(iteration) * kProbeFields
                            : nullptr;
    if (stamps != nullptr) {
      stamps[0] = count;
      stamps[1] = IMPLICIT_GLOBAL_TIMER();
    }
    // q sub-chunks per position: every warp busy when few samples are left.
    int q = 1;
    while (count * q * 2 <= kFusedWarps) q *= 2;
    bool tensor = false;
    if constexpr (std::is_same<S, double>::value) tensor = a.tensor_cores && q == 1;
    if (tensor) {  // phase A on the tensor cores
      if constexpr (std::is_same<S, double>::value)
        TensorPartialAttention(a, g, xs, span, partials, work, slot_column, active, count);
    } else if (q == 1) {  // phase A: warp w takes positions w, w + W, ... (at most K)
      for (int j0 = warp; j0 < count; j0 += K * kFusedWarps) {
        int cols[K], taken = 0;
        S* outs[K];
#pragma unroll
        for (int s = 0; s < K; ++s) {
          const int j = j0 + s * kFusedWarps;
          cols[s] = 0;
          outs[s] = partials + static_cast<std::size_t>(j) * layout.stride;
          if (j < count) {
            cols[s] = slot_column[active[j]];
            taken = s + 1;
          }
        }
        PartialAttention<S, R>(a, xs, g.ld, span, zbuf, wbuf, cols, outs, layout, taken);
      }
    } else if (warp < count * q) {  // phase A: warp w takes sub-chunk w % q of position w / q
      const int j = warp / q, u = warp % q, sub = (span + q - 1) / q;
      const int lo = min(u * sub, span), hi = min(lo + sub, span);
      int cols[K] = {slot_column[active[j]]};
      S* outs[K] = {partials + static_cast<std::size_t>(warp) * layout.stride};
      PartialAttention<S, R>(a, xs + static_cast<std::size_t>(lo) * g.ld, g.ld, hi - lo, zbuf, wbuf, cols, outs,
                             layout, 1);
    }
    // With sub-chunks, warp j combines position j's q parts of this block into
    // entry W + j (after the q W entries of the sub-chunks): the judges then
    // merge one part per block, as with q = 1.
    const int entry_base = q > 1 ? kFusedWarps : 0;
    if (q > 1) {
      __syncthreads();
      if (warp < count) {
        S M, L, y[R];
        bool nan;
        CombineParts<S, R>(BlockParts<S>{partials + static_cast<std::size_t>(warp) * q * layout.stride, layout}, q, n,
                           &M, &L, y, &nan);
        StorePart<S, R>(partials + static_cast<std::size_t>(entry_base + warp) * layout.stride, layout, n, M, L, y,
                        nan);
      }
    }
    if (stamps != nullptr) stamps[2] = IMPLICIT_GLOBAL_TIMER();
    cluster.sync();  // every part is written
    if (stamps != nullptr) stamps[3] = IMPLICIT_GLOBAL_TIMER();
    // Phase B: position j is judged by warp j / C of block j % C.
    for (int j = rank + blocks * warp; j < count; j += blocks * kFusedWarps) {
      const int p = active[j], column = slot_column[p];
      const int t = __ldcg(a.st.iteration + column);
      const Record rec = LoadRecord(a.st, column);
      S zv[R], f[R], lse;
      LoadColumn<S, R>(a.z + static_cast<std::size_t>(column) * n, n, zv);
      const ClusterParts<S> parts{partials, entry_base + j, layout};
      MergeParts<S, R>(parts, blocks, n, f, &lse);
      const int stop = JudgeAndStep<S, R>(a, column, t, rec, zv, f, lse);
      if (stop == kFusedRunning) {
        if (lane == 0) a.st.iteration[column] = t + 1;
      } else {
        const int next = __shfl_sync(kFull, lane == 0 ? TakeColumn(a) : 0, 0);
        if (lane < blocks) *cluster.map_shared_rank(slot_column + p, static_cast<unsigned>(lane)) = next;
      }
    }
    if (stamps != nullptr) stamps[4] = IMPLICIT_GLOBAL_TIMER();
    cluster.sync();  // the slot tables, iterates and judge states are written
    if (stamps != nullptr) stamps[5] = IMPLICIT_GLOBAL_TIMER();
  }
#else
  (void)a;  // not compiled for sm_90: PlanClusterHopfieldPicard refuses such a build
#endif
}

template <typename S>
using FusedKernel = void (*)(FusedArgs<S>);
template <typename S>
using ClusterKernel = void (*)(ClusterArgs<S>);

// The kernels for R coordinates per lane (1, 2, 4 or 8).
inline int PerLane(int n) { return n <= kWarp ? 1 : n <= 2 * kWarp ? 2 : n <= 4 * kWarp ? 4 : 8; }
template <typename S>
FusedKernel<S> KernelFor(int per_lane) {
  switch (per_lane) {
    case 1: return FusedPicardKernel<S, 1>;
    case 2: return FusedPicardKernel<S, 2>;
    case 4: return FusedPicardKernel<S, 4>;
    default: return FusedPicardKernel<S, 8>;
  }
}
template <typename S>
ClusterKernel<S> ClusterKernelFor(int per_lane) {
  switch (per_lane) {
    case 1: return ClusterPicardKernel<S, 1>;
    case 2: return ClusterPicardKernel<S, 2>;
    case 4: return ClusterPicardKernel<S, 4>;
    default: return ClusterPicardKernel<S, 8>;
  }
}

template <typename S>
void SetCommon(SolveArgs<S>* a, const S* patterns, int n, int N, S beta, S* z, int batch, const FusedPicardRules& rules,
               double* results) {
  a->patterns = patterns;
  a->n = n;
  a->N = N;
  a->batch = batch;
  a->beta = beta;
  a->z = z;
  a->rules = rules;
  a->results = results;
}

// The dynamic shared memory per block for a chunk of `chunk` patterns: the
// grid kernel's (FusedPicardKernel's layout) and the cluster kernel's
// (ClusterPicardKernel's).
inline std::size_t GridSharedBytes(int n, int chunk, std::size_t scalar_bytes) {
  return scalar_bytes * (static_cast<std::size_t>(chunk) * (n + 1) +
                         static_cast<std::size_t>(kFusedWarps) * kSamplesPerWarp * (n + kWarp));
}
inline std::size_t ClusterSharedBytes(int n, int chunk, std::size_t scalar_bytes) {
  static_assert(kFusedWarps * kSamplesPerWarp <= kClusterSlots && kWarp <= kTileStride,
                "the warps' buffers fit in the cluster kernel's work area");
  return scalar_bytes * ClusterLayout(n, chunk).Elements();
}

}  // namespace
}  // namespace internal
}  // namespace cuda
}  // namespace implicit
