// implicit-bench's command line (bench/bench_options.h).
#include "bench/bench_options.h"

#include "common/cli.h"
#include "common/output_files.h"
#include "common/solvers.h"

#include <algorithm>
#include <string>
#include <vector>

namespace implicit_apps {
namespace {

const char* kDescription = R"(Times each problem's floor (the dense products, GEMMs, that one full-batch
evaluation of its map must do; median of --repeat runs) and one full-batch map
evaluation, then runs each solver to tolerance once and reports its wall time,
converged samples, evaluations and its time per sample-iteration as a multiple
of the floor's time per sample:
  x floor = (solve seconds / sample evaluations) / (floor seconds / B).)";

}  // namespace

// The default solver list: libimplicit's solvers but newton, whose dense
// Jacobian costs n Jacobian-vector products per iteration: one iteration on
// the 1797 Hopfield queries alone takes longer than the whole default run
// should.
std::vector<std::string> DefaultSolvers() {
  std::vector<std::string> names;
  for (const std::string& n : BuiltInSolvers())
    if (n != "newton") names.push_back(n);
  return names;
}

// --patterns default per problem: the whole digits set, or the problem's
// bench_patterns (deq-tanh and et-digits are not about the number of stored
// patterns, and et-digits' slowest solvers would take minutes at 1797).
long DefaultPatterns(const std::string& problem, long available) {
  const int n = FindProblem(problem).bench_patterns;
  return n > 0 ? std::min<long>(n, available) : available;
}

std::string PatternsDefaultText() {
  std::string text;
  for (const ProblemInfo& p : RegisteredProblems())
    text += (text.empty() ? "" : ", ") + p.name + " " +
            (p.bench_patterns > 0 ? std::to_string(p.bench_patterns) : std::string("all"));
  return text;
}

// The command line into `o`; false when it asked for --help or --list-problems.
bool ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app(kDescription, "implicit-bench");
  ConfigureApp(app);
  o->problems.settings.beta = 2.0;
  AddProblemOptions(app, &o->problems, true);
  AddList(app, "--solvers", &o->solvers,
          "comma-separated solver names, or \"all\" for every registered one,\n"
          "the KINSOL / PETSc backends built in included (default: libimplicit's\n"
          "but newton, whose dense Jacobian costs n Jacobian-vector products per\n"
          "iteration)",
          JoinNames(DefaultSolvers(), ","));
  app.add_option("--patterns", o->patterns, "stored patterns = queries B of every problem, up to 1797")
      ->check(IntIn(1, 1000000))
      ->default_str(PatternsDefaultText());
  AddBetaOption(app, &o->problems);
  AddToleranceOptions(app, &o->tol, &o->max_iter);
  app.add_option("--time-limit", o->time_limit,
                 "stop a solve at the first iteration that ends after S seconds, reported\n"
                 "as user_abort with what had converged by then; 0 = no limit")
      ->check(AtLeast(0));
  app.add_option("--repeat", o->repeat, "timed runs of each floor and map evaluation")->check(IntIn(1, 1000));
  app.add_option("--solves", o->solves,
                 "solve each problem K times with one solver object, from the same initial\n"
                 "state, and report the last solve (a training loop's steady state: the\n"
                 "solver's buffers kept from its earlier solves); the first solve's time is\n"
                 "in the JSON (not for --mixed)")
      ->check(IntIn(1, 100));
  app.add_option("--threads", o->threads,
                 "threads for Eigen's matrix products (OpenMP builds only);\n"
                 "0 = Eigen's default, OMP_NUM_THREADS or all cores")
      ->check(IntIn(0, 1024));
  app.add_flag("--float", o->with_float,
               "also build each problem in float: float floors, map times and solves\n(tolerance --float-tol)");
  app.add_option("--float-tol", o->float_tol, "absolute tolerance of the float solves")->check(Positive());
  app.add_flag("--mixed", o->mixed,
               "also run each solver in mixed precision (SolveMixedPrecision): in float to\n"
               "--mixed-tol, then in double to --tol; judged in double");
  app.add_option("--mixed-tol", o->mixed_tol, "absolute tolerance of the float stage of --mixed")->check(Positive());
  AddSeedOption(app, &o->seed);
  app.add_option("--data", o->data, "digits.csv.gz, or a directory holding it")->default_str("")->check(PathCheck());
  app.add_option("--json", o->json, "write every number (machine, build flags, floors, results)")->check(PathCheck());
  app.add_flag("--quiet", o->quiet, "no progress lines on stderr");
  app.add_flag("--autodiff", o->autodiff,
               "instead of the solvers: the derivatives of user energies (AutoDiffEnergy),\n"
               "forward against reverse mode and the closed form, as multiples of the value");
  std::vector<std::string> dimensions;
  AddList(app, "--autodiff-dims", &dimensions, "state dimensions n of --autodiff", "64,256,1024,4096");
  AddList(app, "--autodiff-energies", &o->autodiff_options.energies,
          "energies of --autodiff: retrieval, attention (at each dimension), et", "retrieval,attention,et");
  AddList(app, "--autodiff-styles", &o->autodiff_options.styles,
          "how --autodiff's functors are written: blocks (ad:: blocks), eigen (Eigen\n"
          "expressions), loop (scalar loops, retrieval only)", "blocks,eigen,loop");
  app.add_flag("--graph-et", o->graph_et,
               "instead of the solvers: the graph Energy Transformer's map, VJP and\n"
               "parameter VJP on the shipped graphs, per call and per edge");
  AddList(app, "--graph-et-graphs", &o->graph_options.graphs, "graphs of --graph-et",
          "gen_1000,inj_cora,reddit");
  app.add_flag("--sweep", o->sweep,
               "instead of the problems: the random-map sweep (problems/random_maps.h):\n"
               "random user-like maps of five families, each solver against Picard from\n"
               "the same start (samples lost, evaluations, maps with more evaluations);\n"
               "--tol (default 1e-8), --max-iter (default 3000), --seed");
  app.add_option("--sweep-maps", o->sweep_settings.maps, "--sweep: number of random maps")->check(IntIn(1, 100000));
  app.add_option("--sweep-batch", o->sweep_settings.batch, "--sweep: samples per map")->check(IntIn(1, 100000));
  app.add_option("--sweep-solvers", o->sweep_solvers,
                 "--sweep: solvers compared with Picard, space-separated, each a name or\n"
                 "name:key=value,key=value (e.g. anderson:memory=10,mixing=0.5)");
  DeviceBenchOptions& d = o->device_options;
  app.add_option("--device", o->device,
                 "cpu: the built-in problems on this machine's cores; cuda: the solves on\n"
                 "the GPU against the cuBLAS GEMM floor (bench/cuda_bench.h; --solvers\n"
                 "picard,anderson by default, --tol for the double and --float-tol for\n"
                 "the float problem, --max-iter, --repeat)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  AddList(app, "--device-problems", &d.problems,
          "--device cuda: hopfield-digits (double), retrieval (float), et (double)", "hopfield-digits,retrieval,et");
  app.add_option("--et-samples", d.et_samples, "--device cuda et: samples B")->check(IntIn(1, 1000000));
  app.add_option("--retrieval-patterns", d.retrieval_patterns, "--device cuda retrieval: stored patterns N")
      ->check(IntIn(1, 10000000));
  app.add_option("--retrieval-dim", d.retrieval_dimension, "--device cuda retrieval: pattern width d")
      ->check(IntIn(1, 65536));
  app.add_option("--retrieval-queries", d.retrieval_queries, "--device cuda retrieval: queries B (<= N)")
      ->check(IntIn(1, 10000000));
  app.add_option("--retrieval-beta", d.retrieval_beta, "--device cuda retrieval: inverse temperature")
      ->check(Positive());
  app.add_flag("--tf32", d.tf32, "--device cuda: float GEMMs on TF32 tensor cores (about 1e-3 relative error)");
  bool no_cpu_reference = false;
  app.add_flag("--no-cpu-reference", no_cpu_reference,
               "--device cuda: skip the CPU solves of hopfield-digits (the same-run speed-up)");
  if (!Parse(app, argc, argv) || !CheckProblemSelection(o->problems)) return false;
  d.cpu_reference = !no_cpu_reference;
  if (o->device == "cuda") {
    if (app.count("--solvers") > 0) d.solvers = o->solvers;
    for (const std::string& s : d.solvers) {
      if (s != "picard" && s != "anderson")
        throw CLI::ValidationError("--solvers", "on the device: picard, anderson (got " + s + ")");
    }
    d.tol = o->tol;
    d.float_tol = o->float_tol;
    d.max_iter = o->max_iter;
    d.repeat = o->repeat;
    d.quiet = o->quiet;
  }
  if (o->sweep) {
    if (app.count("--tol") > 0) o->sweep_settings.tolerance = o->tol;
    if (app.count("--max-iter") > 0) o->sweep_settings.max_iterations = static_cast<int>(o->max_iter);
    o->sweep_settings.seed = static_cast<unsigned>(o->seed);
  }
  ExpandAllSolvers(&o->solvers);
  for (const std::string& s : o->solvers) CheckSolverName(s);
  o->problems.settings.seed = static_cast<unsigned>(o->seed);
  if (!dimensions.empty()) {
    o->autodiff_options.dimensions = ParseNumbers<long>("--autodiff-dims", dimensions, IntIn(16, 65536));
  }
  for (const std::string& e : o->autodiff_options.energies)
    Require(e == "retrieval" || e == "attention" || e == "et",
            "--autodiff-energies: unknown energy '" + Excerpt(e) + "' (retrieval, attention, et)");
  for (const std::string& e : o->autodiff_options.styles)
    Require(e == "blocks" || e == "eigen" || e == "loop",
            "--autodiff-styles: unknown style '" + Excerpt(e) + "' (blocks, eigen, loop)");
  o->autodiff_options.repeat = std::min<long>(o->repeat, 3);  // --repeat is >= 1
  o->autodiff_options.quiet = o->quiet;
  for (const std::string& g : o->graph_options.graphs)
    Require(g == "gen_1000" || g == "inj_cora" || g == "reddit",
            "--graph-et-graphs: unknown graph '" + Excerpt(g) + "' (available: gen_1000, inj_cora, reddit)");
  o->graph_options.repeat = o->repeat;
  o->graph_options.quiet = o->quiet;
  CheckWritable(o->json, "--json");
  CheckDistinctFiles({{"--json", o->json}}, {{"--data", o->data}});
  return true;
}

}  // namespace implicit_apps
