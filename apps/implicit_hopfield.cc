// implicit-hopfield: associative-memory experiments on the digits and on
// random patterns.
//
//   implicit-hopfield retrieval --patterns 100 --beta 4
//   implicit-hopfield retrieval --patterns 1797 --beta 2 --device cuda   # on the GPU
//   implicit-hopfield completion --beta 1
//   implicit-hopfield capacity --dimension 64 --flip 0.1
//   implicit-hopfield sparse --patterns 100
// Every subcommand prints a table and takes --json PATH.
// The subcommands live in hopfield/ (retrieval, completion, capacity, sparse;
// shared: the options and checks they have in common); this file holds the
// command line and main.
#include "common/cli.h"
#include "common/output_files.h"
#include "hopfield/capacity.h"
#include "hopfield/completion.h"
#include "hopfield/retrieval.h"
#include "hopfield/shared.h"
#include "hopfield/sparse.h"

namespace implicit_apps {
namespace {

int Run(int argc, char** argv) {
  CLI::App app("Associative-memory experiments. Digits are scaled x/8 - 1 everywhere.", "implicit-hopfield");
  ConfigureApp(app);
  app.require_subcommand(0, 1);
  RetrievalSettings retrieval;
  double completion_beta = 1.0;
  CapacitySettings capacity;
  SparseSettings sparse;
  CLI::App* retrieval_cmd = AddRetrieval(app, &retrieval);
  CLI::App* completion_cmd = AddCompletion(app, &completion_beta);
  CLI::App* capacity_cmd = AddCapacity(app, &capacity);
  CLI::App* sparse_cmd = AddSparse(app, &sparse);
  Common common;
  for (CLI::App* sub : {retrieval_cmd, completion_cmd, capacity_cmd, sparse_cmd}) AddCommonOptions(*sub, &common);
  if (!Parse(app, argc, argv)) return 0;
  if (app.get_subcommands().empty())
    throw UsageError("missing subcommand (retrieval, completion, capacity or sparse)");
  CheckWritable(common.json, "--json");
  CheckDistinctFiles({{"--json", common.json}}, {{"--data", common.data}});
  if (retrieval_cmd->parsed()) return Retrieval(retrieval, common);
  if (completion_cmd->parsed()) return Completion(completion_beta, common);
  if (capacity_cmd->parsed()) return Capacity(capacity, common);
  return Sparse(sparse, common);
}

}  // namespace
}  // namespace implicit_apps

int main(int argc, char** argv) {
  return implicit_apps::Main("implicit-hopfield", [&] { return implicit_apps::Run(argc, argv); });
}
