// The fused Picard loops of the softmax Hopfield map: their plans and launches
// (the kernels: fused_picard_kernels.cuh, whose opening comment describes them).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "fused_picard_kernels.cuh"

namespace implicit {
namespace cuda {
namespace internal {
namespace {

// The device's facts the plans need (false: they could not be read).
struct DeviceFacts {
  int sms = 0, shared_limit = 0, cooperative = 0, clusters = 0;
};
bool ReadDeviceFacts(DeviceFacts* d) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->cooperative, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->clusters, cudaDevAttrClusterLaunch, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d->shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// Why neither fused kernel takes the problem (nullptr: they may): an empty
// problem, n above 256, or the device's facts (read into *d) unreadable.
const char* RefuseProblem(int n, int N, int batch, DeviceFacts* d) {
  if (n < 1 || N < 1 || batch < 1) return "an empty problem";
  if (n > kWarp * kMaxPerLane) return "the dimension is above 256";
  if (!ReadDeviceFacts(d)) return "the device's attributes could not be read";
  return nullptr;
}

// The launch of `clusters` clusters of plan.pattern_chunks blocks each.
cudaLaunchConfig_t ClusterLaunch(const FusedPicardPlan& plan, int clusters, cudaStream_t stream,
                                 cudaLaunchAttribute* attribute) {
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = static_cast<unsigned>(plan.pattern_chunks);
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(plan.pattern_chunks * clusters));
  config.blockDim = dim3(kFusedThreads);
  config.dynamicSmemBytes = plan.shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

}  // namespace

// ---- plans and launches -----------------------------------------------------------------

ClusterShape ChooseClusterShape(int n, int N, int batch, std::size_t scalar_bytes, int sms, std::size_t shared_limit,
                                int max_cluster) {
  auto shape_for = [&](int blocks) {
    ClusterShape s;
    s.cluster = blocks;
    s.chunk = (N + blocks - 1) / blocks;
    s.shared_bytes = ClusterSharedBytes(n, s.chunk, scalar_bytes);
    return s;
  };
  ClusterShape shape;
  if (n < 1 || N < 1 || batch < 1 || sms < 1) return shape;
  for (int blocks = 1; blocks <= max_cluster; blocks *= 2) {
    const ClusterShape s = shape_for(blocks);
    if (s.shared_bytes <= shared_limit) {
      shape = s;
      break;
    }
  }
  if (shape.cluster == 0) return shape;
  // More blocks per cluster while the device still holds the whole batch in
  // flight (the last samples then run on more multiprocessors).
  while (2 * shape.cluster <= max_cluster && 2 * shape.cluster <= N && 2 * shape.cluster <= sms &&
         static_cast<long long>(sms / (2 * shape.cluster)) * kClusterSlots >= batch) {
    shape = shape_for(2 * shape.cluster);
  }
  return shape;
}

template <typename S>
bool PlanFusedHopfieldPicard(int n, int N, int batch, FusedPicardPlan* plan, const char** why_not) {
  auto no = [&](const char* why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
  DeviceFacts d;
  if (const char* why = RefuseProblem(n, N, batch, &d)) return no(why);
  if (!d.cooperative) return no("the device has no cooperative launch");
  int chunks = (N + kTargetChunk - 1) / kTargetChunk;
  if (chunks > d.sms) chunks = d.sms;
  const int chunk = (N + chunks - 1) / chunks;
  chunks = (N + chunk - 1) / chunk;
  const int per_lane = PerLane(n);
  const FusedKernel<S> kernel = KernelFor<S>(per_lane);
  const std::size_t shared = GridSharedBytes(n, chunk, sizeof(S));
  if (shared + sizeof(int) * kFusedThreads > static_cast<std::size_t>(d.shared_limit))  // + Compact's
    return no("a chunk of the patterns does not fit in shared memory");
  int per_sm = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedThreads, shared) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return no("the kernel cannot be resident with its shared memory");
  }
  int groups = per_sm * d.sms / chunks;
  const int useful = (batch + kFusedWarps - 1) / kFusedWarps;
  if (groups > useful) groups = useful;
  if (groups < 1) groups = 1;
  FusedArgs<S> a{};
  *plan = FusedPicardPlan{};
  plan->pattern_chunks = chunks;
  plan->sample_groups = groups;
  plan->chunk = chunk;
  plan->per_lane = per_lane;
  plan->shared_bytes = shared;
  plan->workspace_bytes = Carve<S>(nullptr, n, batch, chunks, chunks * groups, &a);
  return true;
}

template <typename S>
bool PlanClusterHopfieldPicard(int n, int N, int batch, FusedPicardPlan* plan, const char** why_not) {
  auto no = [&](const char* why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
  DeviceFacts d;
  if (const char* why = RefuseProblem(n, N, batch, &d)) return no(why);
  if (!d.clusters) return no("the device has no thread-block clusters");
  const int per_lane = PerLane(n);
  const ClusterKernel<S> kernel = ClusterKernelFor<S>(per_lane);
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();
    return no("the cluster kernel's attributes could not be read");
  }
  if (attributes.ptxVersion < 90) return no("the build has no sm_90 code for the cluster kernel");
  const std::size_t limit = static_cast<std::size_t>(d.shared_limit) > attributes.sharedSizeBytes
                                ? d.shared_limit - attributes.sharedSizeBytes
                                : 0;
  const ClusterShape shape = ChooseClusterShape(n, N, batch, sizeof(S), d.sms, limit, kMaxClusterBlocks);
  if (shape.cluster == 0)
    return no("a cluster's share of the patterns and its working arrays do not fit in shared memory");
  *plan = FusedPicardPlan{};
  plan->pattern_chunks = shape.cluster;
  plan->chunk = shape.chunk;
  plan->per_lane = per_lane;
  plan->shared_bytes = shape.shared_bytes;
  int clusters = 0;
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = ClusterLaunch(*plan, 1, nullptr, &attribute);
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(shape.shared_bytes)) != cudaSuccess ||
      cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &config) != cudaSuccess ||
      clusters < 1) {
    cudaGetLastError();
    return no("a cluster cannot be resident with its shared memory");
  }
  if (clusters > batch) clusters = batch;
  plan->sample_groups = clusters;
  const int slots = (batch + clusters - 1) / clusters;
  plan->slots = slots < kClusterSlots ? slots : kClusterSlots;
  plan->tensor_cores = std::is_same<S, double>::value;
  ClusterArgs<S> a{};
  plan->workspace_bytes = Carve<S>(nullptr, n, batch, &a);
  return true;
}

template <typename S>
void FusedHopfieldPicard(cudaStream_t stream, const FusedPicardPlan& plan, const S* patterns, int n, int N, S beta,
                         S* z, int batch, const FusedPicardRules& rules, void* workspace, double* results) {
  FusedArgs<S> a{};
  SetCommon<S>(&a, patterns, n, N, beta, z, batch, rules, results);
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

template <typename S>
void ClusterHopfieldPicard(cudaStream_t stream, const FusedPicardPlan& plan, const S* patterns, int n, int N, S beta,
                           S* z, int batch, const FusedPicardRules& rules, void* workspace, double* results,
                           long long* probe, int probe_iterations) {
  ClusterArgs<S> a{};
  SetCommon<S>(&a, patterns, n, N, beta, z, batch, rules, results);
  a.cluster = plan.pattern_chunks;
  a.chunk = plan.chunk;
  a.slots = plan.slots;
  a.tensor_cores = plan.tensor_cores;
  a.probe = probe;
  a.probe_iterations = probe != nullptr ? probe_iterations : 0;
  Carve<S>(static_cast<unsigned char*>(workspace), n, batch, &a);
  CheckCall(cudaMemsetAsync(a.queue, 0, sizeof(int), stream), "the cluster Picard kernel's queue");
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = ClusterLaunch(plan, plan.sample_groups, stream, &attribute);
  CheckCall(cudaLaunchKernelEx(&config, ClusterKernelFor<S>(plan.per_lane), a), "the cluster Picard kernel");
}

#define IMPLICIT_FUSED_PICARD(S)                                                                             \
  template bool PlanFusedHopfieldPicard<S>(int, int, int, FusedPicardPlan*, const char**);                  \
  template bool PlanClusterHopfieldPicard<S>(int, int, int, FusedPicardPlan*, const char**);                \
  template void FusedHopfieldPicard<S>(cudaStream_t, const FusedPicardPlan&, const S*, int, int, S, S*, int, \
                                       const FusedPicardRules&, void*, double*);                            \
  template void ClusterHopfieldPicard<S>(cudaStream_t, const FusedPicardPlan&, const S*, int, int, S, S*, int, \
                                         const FusedPicardRules&, void*, double*, long long*, int);
IMPLICIT_FUSED_PICARD(float)
IMPLICIT_FUSED_PICARD(double)
#undef IMPLICIT_FUSED_PICARD

}  // namespace internal
}  // namespace cuda
}  // namespace implicit
