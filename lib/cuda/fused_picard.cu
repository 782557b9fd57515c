// The fused Picard loop of the softmax Hopfield map (cuda_kernels.h): one
// cooperative kernel for the whole solve.
//
// Block (c, g) of the grid owns the patterns of chunk c (in shared memory,
// pattern-major with a padded stride so that both a lane per pattern and a
// lane per coordinate read without bank conflicts) and the active positions
// k = g W + w, g W + w + G W, ... (W warps per block, G sample groups). Each
// iteration has three phases, the first two ending at grid-wide barriers:
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
#include <implicit/core/cuda_kernel_support.cuh>
#include <implicit/core/cuda_kernels.h>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <limits>

namespace implicit {
namespace cuda {
namespace internal {
namespace {

namespace cg = cooperative_groups;

constexpr int kFusedThreads = 512;
constexpr int kFusedWarps = kFusedThreads / kWarp;
constexpr int kMaxPerLane = 8;       // coordinates per lane: n <= 256
constexpr int kSamplesPerWarp = 4;   // samples a warp takes at once in phase A
constexpr int kTargetChunk = 64;     // patterns per block, before the grid is filled (measured: 32, 64, 128)
constexpr unsigned kFull = 0xffffffffu;

// Per-sample judge state (indexed by batch column) and the active lists.
struct JudgeState {
  double *record_residual, *record_energy, *kept_residual, *relative, *initial_residual;
  int *stall, *flags;  // flags[k]: active position k goes on
  int* lists;          // per block, two lists of B (its own copy of the active list)
};

template <typename S>
struct FusedArgs {
  const S* patterns;
  int n, N, batch;
  S beta;
  S* z;
  S* kept;      // n x batch: each sample's kept iterate
  S* partials;  // chunks x batch x (n + 2): m, l, y of (chunk, active position)
  FusedPicardRules rules;
  double epsilon;  // of S (the energy's rounding slack)
  JudgeState st;
  double* results;
  int chunks, groups, chunk;
};

// The workspace carved into the arrays (base == nullptr: only the size).
template <typename S>
std::size_t Carve(unsigned char* base, int n, int batch, int chunks, int blocks, FusedArgs<S>* a) {
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    unsigned char* p = base == nullptr ? nullptr : base + at;
    at += (bytes + 255) / 256 * 256;
    return p;
  };
  const std::size_t b = static_cast<std::size_t>(batch);
  a->kept = reinterpret_cast<S*>(take(sizeof(S) * n * b));
  a->partials = reinterpret_cast<S*>(take(sizeof(S) * chunks * b * (n + 2)));
  a->st.record_residual = reinterpret_cast<double*>(take(sizeof(double) * b));
  a->st.record_energy = reinterpret_cast<double*>(take(sizeof(double) * b));
  a->st.kept_residual = reinterpret_cast<double*>(take(sizeof(double) * b));
  a->st.relative = reinterpret_cast<double*>(take(sizeof(double) * b));
  a->st.initial_residual = reinterpret_cast<double*>(take(sizeof(double) * b));
  a->st.stall = reinterpret_cast<int*>(take(sizeof(int) * b));
  a->st.flags = reinterpret_cast<int*>(take(sizeof(int) * b));
  a->st.lists = reinterpret_cast<int*>(take(sizeof(int) * 2 * b * blocks));
  return at;
}

template <typename S>
__device__ inline S WarpAllMax(S v) {  // the same value in every lane (NaN ignored)
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const S other = __shfl_xor_sync(kFull, v, o);
    v = other > v ? other : v;
  }
  return v;
}
template <typename T>
__device__ inline T WarpAllSum(T v) {  // butterfly: bitwise the same in every lane
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Phase A for up to kSamplesPerWarp active positions ks[0..count) (batch
// columns cols[]) and the chunk [c0, c1): a lane per pattern for the scores,
// a lane per coordinate for y, the samples side by side (independent chains).
template <typename S, int R>
__device__ void PartialAttention(const FusedArgs<S>& a, const S* xs, S* zbuf, S* wbuf, int c0, int c1, int c,
                                 const int* ks, const int* cols, int count) {
  constexpr int K = kSamplesPerWarp;
  const int lane = threadIdx.x % kWarp, n = a.n, stride = n + 1;
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
  for (int t0 = c0; t0 < c1; t0 += kWarp) {
    const int q = t0 + lane;
    const bool valid = q < c1;
    S acc[K];
#pragma unroll
    for (int s = 0; s < K; ++s) acc[s] = 0;
    if (valid) {
      const S* x = xs + static_cast<std::size_t>(q - c0) * stride;
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
    const int tile = c1 - t0 < kWarp ? c1 - t0 : kWarp;
#pragma unroll 4
    for (int j = 0; j < tile; ++j) {
      const S* x = xs + static_cast<std::size_t>(t0 + j - c0) * stride;
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
    S* out = a.partials + (static_cast<std::size_t>(c) * a.batch + ks[s]) * (n + 2);
    if (lane == 0) {
      out[0] = any_nan ? S(NAN) : m[s];
      out[1] = l[s];
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = lane + r * kWarp;
      if (i < n) out[2 + i] = y[s][r];
    }
  }
  __syncwarp();  // zbuf is the next samples'
}

// Phase B for active position k (batch column `column`) at observation t:
// merges the chunks (a lane per chunk for their max and sum), judges the
// sample (SampleJudge::Judge's forward rules, then the iteration budget),
// steps or stops it. Sets flags[k] = goes on.
template <typename S, int R>
__device__ void JudgeSample(const FusedArgs<S>& a, int k, int column, int t) {
  const int lane = threadIdx.x % kWarp, n = a.n, chunks = a.chunks;
  const std::size_t part = static_cast<std::size_t>(a.batch) * (n + 2);
  const S* p0 = a.partials + static_cast<std::size_t>(k) * (n + 2);
  // The sample's state and z first: their loads overlap the merge's.
  const JudgeState& st = a.st;
  const double initial_before = __ldcg(st.initial_residual + column);
  const double record_residual = __ldcg(st.record_residual + column);
  double record_energy = __ldcg(st.record_energy + column);
  const int stall_before = __ldcg(st.stall + column);
  double kept_residual = __ldcg(st.kept_residual + column), relative_out = __ldcg(st.relative + column);
  S* zc = a.z + static_cast<std::size_t>(column) * n;
  S zv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    zv[r] = i < n ? __ldcg(zc + i) : S(0);
  }
  S M = S(-INFINITY), m_lane[2] = {S(-INFINITY), S(-INFINITY)}, l_lane[2] = {0, 0};
  bool nan = false;
  for (int c = lane, pass = 0; c < chunks; c += kWarp, ++pass) {
    const S mc = __ldcg(p0 + c * part), lc = __ldcg(p0 + c * part + 1);
    if (pass == 0) m_lane[0] = mc, l_lane[0] = lc;  // kept for the weights below
    if (pass == 1) m_lane[1] = mc, l_lane[1] = lc;
    if (mc != mc) nan = true;
    else if (mc > M) M = mc;
  }
  M = WarpAllMax(M);
  nan = __any_sync(kFull, nan);
  S L = 0, f[R];
#pragma unroll
  for (int r = 0; r < R; ++r) f[r] = 0;
  for (int base = 0; base < chunks; base += kWarp) {
    S w = 0;  // lane c's chunk weight e^(m_c - M) (0: empty or NaN)
    if (base + lane < chunks) {
      const S* pc = p0 + (base + lane) * part;
      const int pass = base / kWarp;
      const S mc = pass == 0 ? m_lane[0] : pass == 1 ? m_lane[1] : __ldcg(pc);
      if (mc > S(-INFINITY)) {
        w = exp(mc - M);
        L += w * (pass == 0 ? l_lane[0] : pass == 1 ? l_lane[1] : __ldcg(pc + 1));
      }
    }
    const int span = chunks - base < kWarp ? chunks - base : kWarp;
#pragma unroll 8
    for (int j = 0; j < span; ++j) {  // (unrolled: several chunks' loads in flight)
      const S wj = __shfl_sync(kFull, w, j);
      const S* yc = p0 + (base + j) * part + 2;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = lane + r * kWarp;
        if (i < n) f[r] += wj * __ldcg(yc + i);
      }
    }
  }
  L = WarpAllSum(L);
  double r2 = 0, f2 = 0, z2 = 0;
  int finite = 1;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    if (i >= n) continue;
    f[r] = nan ? S(NAN) : f[r] / L;
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
  const S lse = nan ? S(NAN) : static_cast<S>(M + log(L));
  const double e = static_cast<S>(0.5 * z2 - double(lse) / double(a.beta));

  // The judge (every lane alike; lane 0 writes the state).
  const FusedPicardRules& rules = a.rules;
  const bool first = t == 0;
  const double relative = scale > 0 ? r / scale : r;
  int stop = kFusedRunning;
  bool keep = false;
  if (!isfinite(r) || !isfinite(scale) || !finite || (rules.use_energy && !isfinite(e))) {
    stop = kFusedNonFinite;
  } else {
    const double initial = first ? r : initial_before;
    const bool residual_record = r < record_residual;
    keep = residual_record;
    bool progress = residual_record;
    if (rules.use_energy) {
      const double slack = 16.0 * a.epsilon * (1.0 + fabs(e));
      progress = progress || e < record_energy - slack;
      keep = e <= record_energy;
      if (keep) record_energy = e;
    }
    if (keep) {
      kept_residual = r;
      relative_out = relative;
    }
    const int stall = progress ? 0 : stall_before + 1;
    if (r <= rules.absolute_tolerance || r <= rules.relative_tolerance * scale) {
      relative_out = relative;
      stop = kFusedConverged;
    } else if (!first && r > rules.divergence_threshold * fmax(initial, DBL_MIN)) {
      stop = kFusedDiverged;
    } else if (rules.max_stall_iterations > 0 && stall >= rules.max_stall_iterations) {
      stop = kFusedStalled;
    } else if (t >= rules.max_iterations) {
      stop = kFusedMaxIterations;
    }
    if (lane == 0) {
      st.initial_residual[column] = initial;
      st.record_residual[column] = residual_record ? r : record_residual;
      st.record_energy[column] = record_energy;
      st.kept_residual[column] = kept_residual;
      st.relative[column] = relative_out;
      st.stall[column] = stall;
    }
  }
  S* kc = a.kept + static_cast<std::size_t>(column) * n;
  const bool restore = stop != kFusedRunning && stop != kFusedConverged && isfinite(kept_residual);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = lane + r * kWarp;
    if (i >= n) continue;
    if (keep) kc[i] = zv[r];
    if (stop == kFusedRunning) {
      zc[i] = zv[r] + static_cast<S>(rules.damping) * (f[r] - zv[r]);
    } else if (restore && !keep) {
      zc[i] = __ldcg(kc + i);  // the kept iterate (written by this lane, or at an earlier observation)
    }
  }
  if (lane == 0) {
    st.flags[k] = stop == kFusedRunning;
    if (stop != kFusedRunning) {
      double* out = a.results + 4 * static_cast<std::size_t>(column);
      out[0] = stop;
      out[1] = t;
      out[2] = restore ? kept_residual : r;
      out[3] = relative_out;
    }
  }
}

// Phase C, in every block alike (the block's own copy of the list): next =
// the entries of list whose flag is set, in order. Returns their number.
__device__ int Compact(const int* flags, const int* list, int count, int* next) {
  __shared__ int sums[kFusedThreads];
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

// The whole solve. Shared memory: the chunk's patterns, then per warp the
// z of its samples and their weights of one tile.
template <typename S, int R>
__global__ void __launch_bounds__(kFusedThreads, 1) FusedPicardKernel(FusedArgs<S> a) {
  constexpr int K = kSamplesPerWarp;
  cg::grid_group grid = cg::this_grid();
  extern __shared__ double shared_raw[];
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
  for (int b = global; b < a.batch; b += threads) {
    a.st.record_residual[b] = a.st.record_energy[b] = a.st.kept_residual[b] = a.st.relative[b] = INFINITY;
    a.st.initial_residual[b] = 0;
    a.st.stall[b] = 0;
  }
  __syncthreads();
  grid.sync();
  const int group_warp = g * kFusedWarps + warp, group_stride = a.groups * kFusedWarps;
  const int grid_warp = blockIdx.x * kFusedWarps + warp, grid_warps = gridDim.x * kFusedWarps;
  int count = a.batch;
  for (int t = 0; count > 0; ++t) {
    const int* list = lists + (t & 1) * a.batch;
    for (int k0 = group_warp; k0 < count; k0 += K * group_stride) {
      int ks[K], cols[K], taken = 0;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        const int k = k0 + s * group_stride;
        ks[s] = k;
        cols[s] = 0;
        if (k < count) {
          cols[s] = __ldcg(list + k);
          taken = s + 1;
        }
      }
      PartialAttention<S, R>(a, xs, zbuf, wbuf, c0, c1, c, ks, cols, taken);
    }
    grid.sync();
    for (int k = grid_warp; k < count; k += grid_warps) JudgeSample<S, R>(a, k, __ldcg(list + k), t);
    grid.sync();
    count = Compact(a.st.flags, list, count, lists + ((t + 1) & 1) * a.batch);
  }
}

template <typename S>
using FusedKernel = void (*)(FusedArgs<S>);

// The kernel for R coordinates per lane (1, 2, 4 or 8).
template <typename S>
FusedKernel<S> KernelFor(int per_lane) {
  switch (per_lane) {
    case 1: return FusedPicardKernel<S, 1>;
    case 2: return FusedPicardKernel<S, 2>;
    case 4: return FusedPicardKernel<S, 4>;
    default: return FusedPicardKernel<S, 8>;
  }
}

}  // namespace

template <typename S>
bool PlanFusedHopfieldPicard(int n, int N, int batch, FusedPicardPlan* plan, const char** why_not) {
  auto no = [&](const char* why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
  if (n < 1 || N < 1 || batch < 1) return no("an empty problem");
  if (n > kWarp * kMaxPerLane) return no("the dimension is above 256");
  int device = 0, cooperative = 0, sms = 0, shared_limit = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return no("the device's attributes could not be read");
  }
  if (!cooperative) return no("the device has no cooperative launch");
  int chunks = (N + kTargetChunk - 1) / kTargetChunk;
  if (chunks > sms) chunks = sms;
  const int chunk = (N + chunks - 1) / chunks;
  chunks = (N + chunk - 1) / chunk;
  const int per_lane = n <= kWarp ? 1 : n <= 2 * kWarp ? 2 : n <= 4 * kWarp ? 4 : 8;
  const FusedKernel<S> kernel = KernelFor<S>(per_lane);
  const std::size_t shared =
      sizeof(S) * (static_cast<std::size_t>(chunk) * (n + 1) +
                   static_cast<std::size_t>(kFusedWarps) * kSamplesPerWarp * (n + kWarp));
  if (shared + sizeof(int) * kFusedThreads > static_cast<std::size_t>(shared_limit))  // + Compact's
    return no("a chunk of the patterns does not fit in shared memory");
  int per_sm = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedThreads, shared) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return no("the kernel cannot be resident with its shared memory");
  }
  int groups = per_sm * sms / chunks;
  const int useful = (batch + kFusedWarps - 1) / kFusedWarps;
  if (groups > useful) groups = useful;
  if (groups < 1) groups = 1;
  FusedArgs<S> a{};
  plan->pattern_chunks = chunks;
  plan->sample_groups = groups;
  plan->chunk = chunk;
  plan->per_lane = per_lane;
  plan->shared_bytes = shared;
  plan->workspace_bytes = Carve<S>(nullptr, n, batch, chunks, chunks * groups, &a);
  return true;
}

template <typename S>
void FusedHopfieldPicard(cudaStream_t stream, const FusedPicardPlan& plan, const S* patterns, int n, int N, S beta,
                         S* z, int batch, const FusedPicardRules& rules, void* workspace, double* results) {
  FusedArgs<S> a{};
  a.patterns = patterns;
  a.n = n;
  a.N = N;
  a.batch = batch;
  a.beta = beta;
  a.z = z;
  a.rules = rules;
  a.epsilon = std::numeric_limits<S>::epsilon();
  a.results = results;
  a.chunks = plan.pattern_chunks;
  a.groups = plan.sample_groups;
  a.chunk = plan.chunk;
  const int blocks = plan.pattern_chunks * plan.sample_groups;
  Carve<S>(static_cast<unsigned char*>(workspace), n, batch, plan.pattern_chunks, blocks, &a);
  void* args[] = {&a};
  CheckCall(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(KernelFor<S>(plan.per_lane)),
                                        dim3(blocks), dim3(kFusedThreads), args,
                                        plan.shared_bytes, stream),
            "the fused Picard kernel");
}

#define IMPLICIT_FUSED_PICARD(S)                                                                           \
  template bool PlanFusedHopfieldPicard<S>(int, int, int, FusedPicardPlan*, const char**);                \
  template void FusedHopfieldPicard<S>(cudaStream_t, const FusedPicardPlan&, const S*, int, int, S, S*, int, \
                                       const FusedPicardRules&, void*, double*);
IMPLICIT_FUSED_PICARD(float)
IMPLICIT_FUSED_PICARD(double)
#undef IMPLICIT_FUSED_PICARD

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
