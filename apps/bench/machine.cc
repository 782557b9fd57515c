// implicit-bench's machine and build report (bench/machine.h).
#include "bench/machine.h"

#include <implicit/core/cpu_dispatch.h>

#include <Eigen/Core>

#include <sched.h>

#include <cstddef>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace implicit_apps {
namespace {

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        while (!m.empty() && m.front() == ' ') m.erase(m.begin());
        return m;
      }
    }
  }
  return "unknown";
}

struct BuildFlag {
  const char* name;
  bool defined;
};

// A macro is defined when it expands to something other than its own name.
#define IMPLICIT_BENCH_TEXT(x) #x
#define IMPLICIT_BENCH_EXPANDED(x) IMPLICIT_BENCH_TEXT(x)
#define IMPLICIT_BENCH_FLAG(x) BuildFlag{#x, std::string(IMPLICIT_BENCH_EXPANDED(x)) != #x}

// Macros seen when this program was compiled (the library and the apps are
// built with the same project flags; the maps' GEMMs are compiled in the
// program, from headers).
std::vector<BuildFlag> BuildFlags() {
  return {IMPLICIT_BENCH_FLAG(__OPTIMIZE__), IMPLICIT_BENCH_FLAG(NDEBUG),         IMPLICIT_BENCH_FLAG(__SSE2__),
          IMPLICIT_BENCH_FLAG(__AVX__),      IMPLICIT_BENCH_FLAG(__AVX2__),       IMPLICIT_BENCH_FLAG(__FMA__),
          IMPLICIT_BENCH_FLAG(__AVX512F__),  IMPLICIT_BENCH_FLAG(_OPENMP),        IMPLICIT_BENCH_FLAG(EIGEN_USE_BLAS),
          IMPLICIT_BENCH_FLAG(EIGEN_DONT_VECTORIZE)};
}

std::string CompilerVersion() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string EigenVersion() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

std::string BuildFlagText() {
  std::string text;
  for (const BuildFlag& f : BuildFlags())
    text += std::string(text.empty() ? "" : " ") + f.name + "=" + (f.defined ? "1" : "0");
  return text;
}

std::string CpuLevelsText() {
  std::string text;
  for (implicit::CpuLevel l : implicit::AvailableCpuLevels()) text += (text.empty() ? "" : ", ") + std::string(implicit::ToString(l));
  return text;
}

}  // namespace

void PrintMachine() {
  std::cout << "machine: " << std::thread::hardware_concurrency() << " cores (" << UsableCores()
            << " usable by this process), " << CpuModel() << "\n"
            << "build: " << CompilerVersion() << ", Eigen " << EigenVersion() << " (SIMD "
            << Eigen::SimdInstructionSetsInUse() << ", " << Eigen::nbThreads() << " thread(s)); " << BuildFlagText()
            << "\n"
            << "kernels: " << implicit::ToString(implicit::ActiveCpuLevel()) << " (of " << CpuLevelsText()
            << " available; IMPLICIT_CPU_LEVEL picks one)\n";
}

void MachineJson(Json* root) {
  (*root)["machine"] = {{"cores", std::thread::hardware_concurrency()}, {"usable_cores", UsableCores()},
                        {"cpu", CpuModel()}};
  Json& build = (*root)["build"];
  build["compiler"] = CompilerVersion();
  build["eigen"] = EigenVersion();
  build["eigen_simd"] = std::string(Eigen::SimdInstructionSetsInUse());
  build["eigen_threads"] = Eigen::nbThreads();
  build["cpu_level"] = implicit::ToString(implicit::ActiveCpuLevel());
  build["cpu_levels_available"] = Json::array();
  for (implicit::CpuLevel l : implicit::AvailableCpuLevels()) build["cpu_levels_available"].push_back(implicit::ToString(l));
  for (const BuildFlag& f : BuildFlags()) build[f.name] = f.defined;
}

}  // namespace implicit_apps
