// implicit-graph's run results as doubles and its checkpoint of finished runs
// (graph/run_results.h).
#include "graph/run_results.h"

#include "common/format.h"
#include "common/json_output.h"

#include <implicit/core/checkpoint.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

void Pack(const SeedResult& r, std::vector<double>* out) {
  out->insert(out->end(), {double(r.seed), r.auroc, r.auprc, r.macro_f1, r.validation_auroc, r.ms_per_epoch,
                           r.forward_iterations, r.backward_iterations, double(r.best_epoch),
                           double(r.stopped_at_epoch), double(r.diverged_at_epoch)});
}
SeedResult Unpack(const double* v) {
  SeedResult r;
  r.seed = static_cast<long>(v[0]);
  r.auroc = v[1];
  r.auprc = v[2];
  r.macro_f1 = v[3];
  r.validation_auroc = v[4];
  r.ms_per_epoch = v[5];
  r.forward_iterations = v[6];
  r.backward_iterations = v[7];
  r.best_epoch = static_cast<int>(v[8]);
  r.stopped_at_epoch = static_cast<int>(v[9]);
  r.diverged_at_epoch = static_cast<int>(v[10]);
  return r;
}

std::string RunName(const std::string& model, long seed) { return model + "@" + std::to_string(seed); }

std::string CheckpointKey(const Settings& s, const implicit::GraphDataset& g) {
  Json key = SettingsJson(s);
  key["graph"] = {{"source", s.nodes.empty() ? s.graph : g.source}, {"nodes", g.num_nodes()},
                  {"directed_edges", g.num_edges()}, {"features", g.feature_dimension()}};
  return key.dump();
}

FinishedRuns LoadFinishedRuns(const std::string& path, const std::string& key) {
  auto fail = [&](const std::string& what) { return std::runtime_error("--resume: checkpoint '" + path + "' " + what); };
  implicit::Checkpoint ck;
  try {
    ck = implicit::LoadCheckpoint(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + std::string(e.what()));
  }
  const auto program = ck.metadata.find("program");
  if (program == ck.metadata.end() || program->second != "implicit-graph" || !ck.HasParameters("runs"))
    throw fail("was not written by implicit-graph");
  const Json there = Json::parse(ck.metadata["settings"], nullptr, false), here = Json::parse(key);
  if (there.is_discarded()) throw fail("holds malformed settings");
  const Json difference = Json::diff(there, here);  // a JSON patch: the first path that differs
  if (!difference.empty()) {
    const Json::json_pointer where(difference[0].at("path").get<std::string>());
    auto value = [&](const Json& j) { return j.contains(where) ? j.at(where).dump() : std::string("nothing"); };
    throw fail("was written with other settings: " + where.to_string() + " " + value(there) + " there, " +
               value(here) + " here");
  }
  FinishedRuns runs;
  for (const implicit::CheckpointTensor& t : ck.Parameters("runs")) {
    const std::size_t at = t.name.rfind('@');
    const std::string model = t.name.substr(0, at == std::string::npos ? 0 : at);
    const bool known = std::find(kModels.begin(), kModels.end(), model) != kModels.end();
    if (!known || t.rows != static_cast<implicit::Index>(kSeedResultSize) || t.cols != 1 ||
        t.name.substr(at + 1) != std::to_string(static_cast<long>(t.values(0))))
      throw fail("holds a malformed run '" + Excerpt(t.name) + "'");
    runs[t.name] = Unpack(t.values.data());
  }
  return runs;
}

void SaveFinishedRuns(const std::string& path, const std::string& key, const FinishedRuns& runs) {
  implicit::ParameterSet<double> values;
  for (const auto& [name, result] : runs) {
    std::vector<double> packed;
    Pack(result, &packed);
    values.Add(name, static_cast<implicit::Index>(kSeedResultSize), 1);
    values.Block(name) = Eigen::Map<const Matrix<double>>(packed.data(), static_cast<implicit::Index>(packed.size()), 1);
  }
  implicit::Checkpoint ck;
  ck.step = static_cast<std::int64_t>(runs.size());
  ck.metadata["program"] = "implicit-graph";
  ck.metadata["settings"] = key;
  ck.AddParameters("runs", values);
  try {
    implicit::SaveCheckpoint(path, ck);
  } catch (const std::exception& e) {
    throw std::runtime_error("--checkpoint: " + std::string(e.what()));
  }
}

}  // namespace implicit_apps
