// A CPU emulation of the CUDA execution model, for testing the logic of
// device kernels on machines without a GPU (CI). Every CUDA thread is a fiber
// (Boost.Context: a switch is a few instructions, where ucontext's swapcontext
// made two signal-mask system calls, most of the emulation's time) on one OS
// thread, resumed round-robin; warps, blocks, clusters
// and the grid synchronise through barriers at which the fibers yield. It
// covers what solvers/src/cuda/fused_picard_kernels.cuh uses: threadIdx, blockIdx,
// blockDim, gridDim, __syncthreads, __syncwarp, warp shuffles, votes and
// ballots over the full warp, __ldcg, atomicAdd, __popc, a clock, shared memory
// (dynamic and static, one arena per block), cooperative_groups' grid and
// cluster (sync, block_rank, map_shared_rank) and WMMA's double-precision
// 8 x 8 x 4 tiles (nvcuda::wmma: fragments, load, store, fill, mma).
//
// What it cannot show: timing, and memory-ordering or caching bugs (every
// fiber sees every write at once). A fiber runs from one barrier to the next
// without interruption, so data races between barriers do not interleave
// either; compute-sanitizer on a GPU remains the check for those.
//
//   #include "support/cuda_emulation.h"     // after every other header
//   #include "fused_picard_kernels.cuh"
//   implicit_emulation::Run(/*blocks=*/4, /*threads=*/512, /*cluster=*/2, shared_bytes,
//                           [&] { SomeKernel<double, 1>(args); });
#pragma once

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include <math.h>  // exp, log, sqrt, fabs, fmax, isfinite in the global namespace, as in CUDA

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define IMPLICIT_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IMPLICIT_EMULATION_ASAN 1
#endif
#endif
#ifdef IMPLICIT_EMULATION_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define IMPLICIT_HAS_CLUSTERS 1
#define IMPLICIT_DYNAMIC_SHARED(name) double* name = ::implicit_emulation::DynamicShared()
#define IMPLICIT_SHARED_ARRAY(type, name, count) type* name = ::implicit_emulation::StaticShared<type>(__LINE__, count)
#define IMPLICIT_GLOBAL_TIMER() ::implicit_emulation::Clock()

namespace implicit_emulation {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct Fiber;

// A barrier for `expected` fibers: a waiting fiber is not resumed until the
// last one arrives.
class Barrier {
 public:
  explicit Barrier(int expected = 0) : expected_(expected) {}
  void Wait();

 private:
  int expected_;
  std::vector<Fiber*> waiting_;
};

struct Warp {
  Barrier barrier{32};
  std::uint64_t exchange[2][32] = {};  // alternate collectives use alternate rows
};

struct Fiber {
  boost::context::fiber context;    // the suspended fiber, resumed by the scheduler
  boost::context::fiber scheduler;  // inside the fiber: the scheduler to yield to
  char* stack = nullptr;            // its stack's lowest address (kStackBytes)
  Dim3 thread, block;
  int block_index = 0;
  unsigned collectives = 0;  // this lane's warp collectives so far (their row parity)
  bool waiting = false;      // at a barrier that has not filled
  bool finished = false;
};

constexpr std::size_t kStackBytes = 128 * 1024;
constexpr std::size_t kStaticSharedBytes = 16 * 1024;
constexpr std::size_t kArenaAlignment = 128;  // as the kernels' extern __shared__ declaration asks

// A block's shared memory: `words` 8-byte words, kArenaAlignment-aligned,
// zeroed, exactly as long as asked (an address sanitizer sees overruns).
class Arena {
 public:
  explicit Arena(std::size_t words)
      : words_(static_cast<std::uint64_t*>(::operator new[](words * 8, std::align_val_t(kArenaAlignment)))),
        size_(words) {
    std::memset(words_.get(), 0, words * 8);
  }
  std::uint64_t* data() const { return words_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::uint64_t* p) const { ::operator delete[](p, std::align_val_t(kArenaAlignment)); }
  };
  std::unique_ptr<std::uint64_t[], Free> words_;
  std::size_t size_;
};

// One kernel launch: its fibers, barriers and shared-memory arenas.
struct Launch {
  Dim3 grid, block;
  int cluster = 1;
  std::function<void()> body;
  std::vector<Fiber> fibers;
  std::vector<Arena> arenas;  // per block: static, then dynamic shared memory (at the end: an address
                              // sanitizer sees overruns)
  std::vector<Barrier> block_barriers, cluster_barriers;
  Barrier grid_barrier;
  std::vector<Warp> warps;                 // per block, per warp
  std::map<int, std::size_t> static_offsets;  // per declaration (line): its offset in the static part
  std::size_t static_end = 0;
};

inline Launch* g_launch = nullptr;
inline Fiber* g_fiber = nullptr;
#ifdef IMPLICIT_EMULATION_ASAN
inline const void* g_scheduler_stack = nullptr;
inline std::size_t g_scheduler_stack_size = 0;
#endif

// The probe clock: a count of its readings (it only ever increases).
inline long long g_clock = 0;
inline long long Clock() { return ++g_clock; }

inline Fiber& Here() { return *g_fiber; }
inline int Lane() { return static_cast<int>(g_fiber->thread.x % 32); }
inline Warp& MyWarp() {
  const int warps = static_cast<int>((g_launch->block.x + 31) / 32);
  return g_launch->warps[static_cast<std::size_t>(g_fiber->block_index) * warps + g_fiber->thread.x / 32];
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
inline void Yield() {
#ifdef IMPLICIT_EMULATION_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g_scheduler_stack, g_scheduler_stack_size);
#endif
  g_fiber->scheduler = std::move(g_fiber->scheduler).resume();
#ifdef IMPLICIT_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake, &g_scheduler_stack, &g_scheduler_stack_size);
#endif
}

inline void Barrier::Wait() {
  if (static_cast<int>(waiting_.size()) + 1 == expected_) {  // the last one releases the others
    for (Fiber* f : waiting_) f->waiting = false;
    waiting_.clear();
    return;
  }
  waiting_.push_back(g_fiber);
  g_fiber->waiting = true;
  Yield();
}

// A fiber's stack: kStackBytes from the heap (Boost.Context keeps the
// fiber's own record at its top); its lowest address is kept for the address
// sanitizer's switch annotations.
struct StackOf {
  Fiber* fiber;
  boost::context::stack_context allocate() {
    fiber->stack = new char[kStackBytes];
    boost::context::stack_context stack;
    stack.size = kStackBytes;
    stack.sp = fiber->stack + kStackBytes;
    return stack;
  }
  void deallocate(boost::context::stack_context& stack) noexcept {
    delete[] (static_cast<char*>(stack.sp) - stack.size);
  }
};

// The fiber of a thread: it starts running the kernel's body at its first
// resume (with g_fiber set to it) and ends by returning to the scheduler.
inline void Prepare(Fiber* f) {
  f->context = boost::context::fiber(std::allocator_arg, StackOf{f}, [](boost::context::fiber&& scheduler) {
#ifdef IMPLICIT_EMULATION_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_stack, &g_scheduler_stack_size);
#endif
    g_fiber->scheduler = std::move(scheduler);
    g_launch->body();
    g_fiber->finished = true;
#ifdef IMPLICIT_EMULATION_ASAN
    __sanitizer_start_switch_fiber(nullptr, g_scheduler_stack, g_scheduler_stack_size);
#endif
    return std::move(g_fiber->scheduler);
  });
}

// Runs `body` as a kernel of `blocks` blocks of `threads` threads in clusters
// of `cluster` blocks, with `dynamic_bytes` of dynamic shared memory per
// block. seed 0 resumes the fibers in thread order; any other seed in an
// order shuffled afresh on every pass (a GPU promises no order between warps
// or blocks: a read that only works when its writer happens to run first
// shows up). Throws std::runtime_error when the fibers deadlock (every one
// waits at a barrier that can no longer fill). An exception inside the kernel
// (a bad map_shared_rank address, static shared memory exhausted) ends the
// process, as a device fault ends a GPU context.
inline void Run(int blocks, int threads, int cluster, std::size_t dynamic_bytes, std::function<void()> body,
                unsigned seed = 0) {
  if (blocks < 1 || threads < 1 || cluster < 1 || blocks % cluster != 0)
    throw std::invalid_argument("emulated launch: bad shape");
  Launch launch;
  launch.grid.x = static_cast<unsigned>(blocks);
  launch.block.x = static_cast<unsigned>(threads);
  launch.cluster = cluster;
  launch.body = std::move(body);
  const std::size_t arena_words = (kStaticSharedBytes + dynamic_bytes + 7) / sizeof(std::uint64_t);
  launch.arenas.reserve(static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b) launch.arenas.emplace_back(arena_words);
  launch.block_barriers.assign(static_cast<std::size_t>(blocks), Barrier(threads));
  launch.cluster_barriers.assign(static_cast<std::size_t>(blocks / cluster), Barrier(threads * cluster));
  launch.grid_barrier = Barrier(threads * blocks);
  launch.warps.resize(static_cast<std::size_t>(blocks) * ((threads + 31) / 32));
  if (threads % 32 != 0) throw std::invalid_argument("emulated launch: whole warps only");
  launch.fibers.resize(static_cast<std::size_t>(blocks) * threads);
  g_launch = &launch;
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      Fiber& f = launch.fibers[static_cast<std::size_t>(b) * threads + t];
      f.thread.x = static_cast<unsigned>(t);
      f.block.x = static_cast<unsigned>(b);
      f.block_index = b;
      Prepare(&f);
    }
  }
  std::size_t remaining = launch.fibers.size();
  std::vector<std::size_t> order(launch.fibers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937 shuffle(seed);
  while (remaining > 0) {
    bool resumed = false;
    if (seed != 0) std::shuffle(order.begin(), order.end(), shuffle);
    for (std::size_t i : order) {
      Fiber& f = launch.fibers[i];
      if (f.finished || f.waiting) continue;
      resumed = true;
      g_fiber = &f;
#ifdef IMPLICIT_EMULATION_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
      f.context = std::move(f.context).resume();
#ifdef IMPLICIT_EMULATION_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
      if (f.finished) --remaining;
    }
    if (remaining > 0 && !resumed) {
      g_launch = nullptr;
      throw std::runtime_error("emulated kernel deadlocked: every thread waits at a barrier");
    }
  }
  g_launch = nullptr;
  g_fiber = nullptr;
}

inline double* DynamicShared() {
  return reinterpret_cast<double*>(g_launch->arenas[static_cast<std::size_t>(g_fiber->block_index)].data() +
                                   kStaticSharedBytes / sizeof(std::uint64_t));
}

// A `__shared__ T name[count]` declaration (one per source line): the same
// offset in every block's arena.
template <typename T>
T* StaticShared(int line, std::size_t count) {
  Launch& l = *g_launch;
  auto at = l.static_offsets.find(line);
  if (at == l.static_offsets.end()) {
    const std::size_t offset = (l.static_end + 15) / 16 * 16;
    l.static_end = offset + sizeof(T) * count;
    if (l.static_end > kStaticSharedBytes) throw std::length_error("emulated static shared memory exhausted");
    at = l.static_offsets.emplace(line, offset).first;
  }
  auto* base = reinterpret_cast<unsigned char*>(l.arenas[static_cast<std::size_t>(g_fiber->block_index)].data());
  return reinterpret_cast<T*>(base + at->second);
}

// A warp collective: every lane deposits `value`, waits for the others, and
// `pick` reads the deposits.
template <typename T, typename Pick>
auto Collective(T value, Pick pick) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "a warp collective moves at most 8 bytes a lane");
  Warp& w = MyWarp();
  const unsigned row = g_fiber->collectives++ & 1u;
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  w.exchange[row][Lane()] = bits;
  w.barrier.Wait();
  return pick(w.exchange[row]);
}
template <typename T>
T ValueOf(const std::uint64_t* row, int lane) {
  T v;
  std::memcpy(&v, &row[lane], sizeof(T));
  return v;
}

}  // namespace implicit_emulation

#define threadIdx (::implicit_emulation::Here().thread)
#define blockIdx (::implicit_emulation::Here().block)
#define blockDim (::implicit_emulation::g_launch->block)
#define gridDim (::implicit_emulation::g_launch->grid)

inline void __syncthreads() {
  implicit_emulation::g_launch->block_barriers[static_cast<std::size_t>(implicit_emulation::Here().block_index)].Wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) { implicit_emulation::MyWarp().barrier.Wait(); }
template <typename T>
T __shfl_sync(unsigned, T value, int source) {
  return implicit_emulation::Collective(
      value, [&](const std::uint64_t* row) { return implicit_emulation::ValueOf<T>(row, source & 31); });
}
template <typename T>
T __shfl_xor_sync(unsigned, T value, int mask) {
  const int lane = implicit_emulation::Lane();
  return implicit_emulation::Collective(
      value, [&](const std::uint64_t* row) { return implicit_emulation::ValueOf<T>(row, (lane ^ mask) & 31); });
}
template <typename T>
T __shfl_down_sync(unsigned, T value, unsigned delta) {
  const int lane = implicit_emulation::Lane(), source = lane + static_cast<int>(delta);
  return implicit_emulation::Collective(
      value, [&](const std::uint64_t* row) {
        return implicit_emulation::ValueOf<T>(row, source < 32 ? source : lane);
      });
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  return implicit_emulation::Collective(predicate != 0 ? 1 : 0, [](const std::uint64_t* row) {
    unsigned bits = 0;
    for (int lane = 0; lane < 32; ++lane)
      if (row[lane] != 0) bits |= 1u << lane;
    return bits;
  });
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == 0xffffffffu; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace cooperative_groups {
class grid_group {
 public:
  void sync() const { implicit_emulation::g_launch->grid_barrier.Wait(); }
};
class cluster_group {
 public:
  void sync() const {
    implicit_emulation::g_launch->cluster_barriers[static_cast<std::size_t>(implicit_emulation::Here().block_index /
                                                                            implicit_emulation::g_launch->cluster)]
        .Wait();
  }
  unsigned block_rank() const {
    return static_cast<unsigned>(implicit_emulation::Here().block_index % implicit_emulation::g_launch->cluster);
  }
  // The address in block `rank` of the cluster of this block's shared `p`.
  template <typename T>
  T* map_shared_rank(T* p, unsigned rank) const {
    auto& launch = *implicit_emulation::g_launch;
    const int mine = implicit_emulation::Here().block_index;
    const int target = mine / launch.cluster * launch.cluster + static_cast<int>(rank);
    auto* from = reinterpret_cast<unsigned char*>(launch.arenas[static_cast<std::size_t>(mine)].data());
    auto* to = reinterpret_cast<unsigned char*>(launch.arenas[static_cast<std::size_t>(target)].data());
    const std::ptrdiff_t offset = reinterpret_cast<unsigned char*>(p) - from;
    if (offset < 0 || static_cast<std::size_t>(offset) >= launch.arenas[0].size() * sizeof(std::uint64_t))
      throw std::out_of_range("map_shared_rank: not a shared-memory address");
    return reinterpret_cast<T*>(to + offset);
  }
};
inline grid_group this_grid() { return {}; }
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups

// WMMA's double-precision tiles (m8n8k4). Every lane holds the whole tile (a
// GPU spreads it over the lanes in an unspecified way, which a kernel must not
// rely on), so a load, the product and a store are each lane's own; a store
// first waits for the whole warp (its lanes may still be loading what it
// overwrites), which also makes a store that not every lane reaches deadlock.
// Loads and stores check what CUDA requires: a 256-bit aligned address and a
// leading dimension that is a multiple of 16 bytes.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment;
template <typename Layout>
struct fragment<matrix_a, 8, 8, 4, double, Layout> {
  static constexpr int rows = 8, cols = 4;
  static constexpr bool column_major = std::is_same<Layout, col_major>::value;
  double v[8][4];
};
template <typename Layout>
struct fragment<matrix_b, 8, 8, 4, double, Layout> {
  static constexpr int rows = 4, cols = 8;
  static constexpr bool column_major = std::is_same<Layout, col_major>::value;
  double v[4][8];
};
template <>
struct fragment<accumulator, 8, 8, 4, double, void> {
  static constexpr int rows = 8, cols = 8;
  double v[8][8];
};
using Accumulator = fragment<accumulator, 8, 8, 4, double>;

inline void CheckTileAddress(const double* p, unsigned ldm) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) throw std::logic_error("wmma: address not 256-bit aligned");
  if (ldm % 2 != 0) throw std::logic_error("wmma: leading dimension not a multiple of 16 bytes");
}
template <typename Tile>
void LoadTile(Tile& f, const double* p, unsigned ldm, bool column_major) {
  CheckTileAddress(p, ldm);
  for (int r = 0; r < Tile::rows; ++r)
    for (int c = 0; c < Tile::cols; ++c) f.v[r][c] = column_major ? p[c * ldm + r] : p[r * ldm + c];
}
template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 8, 8, 4, double, Layout>& f, const double* p, unsigned ldm) {
  LoadTile(f, p, ldm, fragment<Use, 8, 8, 4, double, Layout>::column_major);
}
inline void load_matrix_sync(Accumulator& f, const double* p, unsigned ldm, layout_t layout) {
  LoadTile(f, p, ldm, layout == mem_col_major);
}
inline void store_matrix_sync(double* p, const Accumulator& f, unsigned ldm, layout_t layout) {
  CheckTileAddress(p, ldm);
  __syncwarp();
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.v[r][c];
}
inline void fill_fragment(Accumulator& f, double value) {
  for (auto& row : f.v)
    for (double& x : row) x = value;
}
template <typename LayoutA, typename LayoutB>
void mma_sync(Accumulator& d, const fragment<matrix_a, 8, 8, 4, double, LayoutA>& a,
              const fragment<matrix_b, 8, 8, 4, double, LayoutB>& b, const Accumulator& c) {
  Accumulator out;
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col) {
      double sum = c.v[r][col];
      for (int k = 0; k < 4; ++k) sum += a.v[r][k] * b.v[k][col];
      out.v[r][col] = sum;
    }
  d = out;
}
}  // namespace wmma
}  // namespace nvcuda
