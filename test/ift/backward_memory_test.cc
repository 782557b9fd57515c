// The backward pass keeps no tape: its memory does not depend on how many
// iterations the forward solve took. Measured by counting heap bytes: this
// executable replaces malloc/free/calloc/realloc with counting wrappers around
// glibc's allocator (Eigen allocates through malloc, operator new does too).
// Under AddressSanitizer (which owns malloc) the byte counts are skipped.
#define BOOST_TEST_MODULE backward_memory
#include <boost/test/unit_test.hpp>

#include <implicit/diff/implicit_diff.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/picard.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "support/ift_problems.h"
#include "support/test_problems.h"

#if defined(__SANITIZE_ADDRESS__)
#define IMPLICIT_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IMPLICIT_COUNT_MALLOC 0
#endif
#endif
#if !defined(IMPLICIT_COUNT_MALLOC) && defined(__GLIBC__)
#define IMPLICIT_COUNT_MALLOC 1
#endif
#ifndef IMPLICIT_COUNT_MALLOC
#define IMPLICIT_COUNT_MALLOC 0
#endif

namespace {
std::atomic<long long> g_current{0};
std::atomic<long long> g_peak{0};
}  // namespace

#if IMPLICIT_COUNT_MALLOC
#include <malloc.h>
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

static void CountAdd(void* p) {
  if (p == nullptr) return;
  const long long now = g_current += static_cast<long long>(malloc_usable_size(p));
  long long peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
static void CountSub(void* p) {
  if (p == nullptr) return;
  g_current -= static_cast<long long>(malloc_usable_size(p));
}
void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  CountAdd(p);
  return p;
}
void free(void* p) {
  CountSub(p);
  __libc_free(p);
}
void* calloc(size_t a, size_t b) {
  void* p = __libc_calloc(a, b);
  CountAdd(p);
  return p;
}
void* realloc(void* p, size_t n) {
  CountSub(p);
  void* q = __libc_realloc(p, n);
  CountAdd(q != nullptr ? q : p);
  return q;
}
void* memalign(size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  CountAdd(p);
  return p;
}
void* aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }
int posix_memalign(void** out, size_t alignment, size_t n) {
  void* p = memalign(alignment, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

using namespace implicit;
using namespace implicit::testing;

namespace {

// Timing repetitions (1 in sanitizer builds, where timings mean nothing).
constexpr int kRepeats = IMPLICIT_COUNT_MALLOC ? 5 : 1;

// Peak heap bytes above the level at the start of f(), and f's wall time
// (the fastest of `repeats` runs: the machines running the tests are shared).
struct Measured {
  long long peak_bytes = 0;
  double seconds = 0.0;
};
template <typename F>
Measured Measure(F&& f, int repeats = 1) {
  Measured m;
  m.seconds = 1e300;
  for (int k = 0; k < repeats; ++k) {
    const long long base = g_current.load();
    g_peak = base;
    const auto start = std::chrono::steady_clock::now();
    f();
    m.seconds = std::min(
        m.seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    m.peak_bytes = std::max(m.peak_bytes, g_peak.load() - base);
  }
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(backward_memory_is_independent_of_forward_iterations) {
  if (!IMPLICIT_COUNT_MALLOC) {
    BOOST_TEST_MESSAGE("heap counting unavailable (sanitizer build or no glibc): skipped");
    return;
  }
  const Index n = 16, p = 4, B = 8;
  TanhDeqMap<double> map(n, p, 0.5, 3);
  map.SetInput(RandomMatrix<double>(p, B, 4));
  const Matrix<double> g = RandomMatrix<double>(n, B, 5);
  Summary forward[2];
  long long backward_peak[2], retained[2];
  for (int k = 0; k < 2; ++k) {
    PicardSolver<double>::Options o;
    o.absolute_tolerance = 1e-12;
    o.max_iterations = 5000;
    o.max_stall_iterations = 0;
    o.damping = k == 0 ? 1.0 : 0.08;  // same equilibrium, ~10x the iterations
    PicardSolver<double> solver(o);
    ImplicitLayer<double> layer(map, solver);
    Matrix<double> z = Matrix<double>::Zero(n, B);
    Measured f = Measure([&] { forward[k] = layer.Forward(z); });
    BOOST_TEST_REQUIRE(forward[k].IsConverged());
    (void)f;
    BackwardResult<double> r;
    for (const char* linear : {"gmres", "fixed_point", "direct"}) {
      BackwardOptions bo;
      bo.linear_solver = linear;
      layer.set_options(bo);
      layer.Backward(g);  // warm-up (first-use allocations of the library)
      Measured m = Measure([&] { r = layer.Backward(g); });
      BOOST_TEST_REQUIRE(r.ok());
      BOOST_TEST_MESSAGE("forward " << forward[k].iterations << " iterations; backward "
                                    << linear << " peak " << m.peak_bytes << " bytes, "
                                    << r.summary.jacobian_products << " products");
      if (std::string(linear) == "gmres") backward_peak[k] = m.peak_bytes;
    }
    // What the layer keeps between Forward and Backward: z* and the Summary.
    const long long before = g_current.load();
    {
      ImplicitLayer<double> fresh(map, solver);
      Matrix<double> z2 = Matrix<double>::Zero(n, B);
      const long long with_z = g_current.load();
      fresh.Forward(z2);
      retained[k] = g_current.load() - with_z;
    }
    BOOST_TEST(g_current.load() == before);  // nothing leaked
  }
  BOOST_TEST(forward[1].iterations >= 8 * forward[0].iterations);
  // Equal up to malloc's rounding: the counts are malloc_usable_size, which
  // exceeds the request by up to a chunk's slack (< 32 bytes) depending on the
  // heap's history. Storage that grew with the forward iterations would differ
  // by at least (477 - 23) x 8 bytes.
  const long long slack = 256;
  BOOST_TEST(std::llabs(backward_peak[0] - backward_peak[1]) <= slack,
             backward_peak[0] << " vs " << backward_peak[1] << " bytes");
  BOOST_TEST(std::llabs(retained[0] - retained[1]) <= slack,
             retained[0] << " vs " << retained[1] << " bytes");
  // The equilibrium itself is n*B doubles; the rest is the per-sample Summary.
  BOOST_TEST(retained[0] < 4 * static_cast<long long>(n * B * sizeof(double)) + 4096);
}

// Backward cost relative to forward on a moderately sized tanh DEQ; printed for
// the report (timings are machine dependent, so only memory is asserted).
BOOST_AUTO_TEST_CASE(backward_cost_relative_to_forward) {
  const Index n = 64, p = 16, B = 32;
  TanhDeqMap<double> map(n, p, 0.9, 7);
  map.SetInput(RandomMatrix<double>(p, B, 8));
  const Matrix<double> g = RandomMatrix<double>(n, B, 9);
  struct Forward {
    std::string name;
    std::unique_ptr<Solver<double>> solver;
  };
  PicardSolver<double>::Options po;
  po.absolute_tolerance = 1e-10;
  po.max_iterations = 2000;
  AndersonSolver<double>::Options ao;
  ao.absolute_tolerance = 1e-10;
  ao.max_iterations = 500;
  std::vector<Forward> forwards;
  forwards.push_back({"picard", std::make_unique<PicardSolver<double>>(po)});
  forwards.push_back({"anderson", std::make_unique<AndersonSolver<double>>(ao)});
  for (const Forward& fw : forwards) {
    ImplicitLayer<double> layer(map, *fw.solver);
    Matrix<double> z = Matrix<double>::Zero(n, B);
    Summary fs;
    layer.Forward(z);  // warm-up
    z.setZero();
    const Measured f = Measure(
        [&] {
          z.setZero();
          fs = layer.Forward(z);
        },
        kRepeats);
    BOOST_TEST_REQUIRE(fs.IsConverged());
    const long long tape = static_cast<long long>(fs.iterations) * n * B * sizeof(double);
    for (const char* method : {"gmres", "minres", "fixed_point", "anderson", "direct", "jfb", "phantom"}) {
      BackwardOptions bo;
      if (std::string(method) == "jfb") {
        bo.method = GradientMethod::kJacobianFree;
      } else if (std::string(method) == "phantom") {
        bo.method = GradientMethod::kPhantom;
      } else {
        bo.linear_solver = method;
      }
      if (std::string(method) == "minres") continue;  // tanh DEQ is not symmetric
      if (!IMPLICIT_COUNT_MALLOC && std::string(method) == "direct") continue;  // slow under ASan
      layer.set_options(bo);
      BackwardResult<double> r = layer.Backward(g);  // warm-up
      const Measured m = Measure([&] { r = layer.Backward(g); }, kRepeats);
      BOOST_TEST_REQUIRE(r.ok(), method << ": " << r.summary.BriefReport());
      BOOST_TEST_MESSAGE("tanh DEQ n=" << n << " B=" << B << " |W|=0.9, forward " << fw.name << " ("
                         << fs.iterations << " its, " << f.seconds * 1e3 << " ms, peak "
                         << f.peak_bytes << " B) | backward " << method << ": "
                         << r.summary.jacobian_products << " VJPs, " << m.seconds * 1e3 << " ms ("
                         << m.seconds / f.seconds << "x forward), peak " << m.peak_bytes << " B ("
                         << double(m.peak_bytes) / double(std::max(f.peak_bytes, 1LL))
                         << "x forward; an unrolled tape would hold " << tape << " B)");
      if (IMPLICIT_COUNT_MALLOC && std::string(method) != "direct") {
        // Bounded workspace: far below storing the forward trajectory.
        // Bounded workspace (GMRES: restart + 1 Krylov batches and a
        // (restart + 1) x restart Hessenberg matrix per sample).
        const long long batch_bytes = static_cast<long long>(n * B * sizeof(double));
        // The result and the parameter-VJP temporary hold 2 parameter vectors.
        const long long fixed = 2 * map.num_parameters() * 8 + 12 * batch_bytes;
        const std::string name = method;
        const long long bound =
            fixed + (name == "gmres" ? (bo.restart + 1) * batch_bytes +
                                           B * (bo.restart + 2) * (bo.restart + 2) * 8
                                     : (name == "anderson" ? 2 * bo.memory * batch_bytes : 0));
        BOOST_TEST(m.peak_bytes < bound, method);
      }
    }
  }
}
