// implicit-et's Workers (et/workers.h): a batch shared out over the model's
// copies on threads and over the MPI ranks, and the shares' gradients and
// predictions combined.
#include "et/workers.h"

#include "common/ranks.h"
#include "common/threads.h"

#include <implicit/solvers/sharded_solve.h>

#include <algorithm>
#include <cstddef>

namespace implicit_apps {

void Workers::Sync() {
  for (std::size_t t = 1; t < models_.size(); ++t) {
    models_[t]->params().values() = main().params().values();
    models_[t]->energy_params().values() = main().energy_params().values();
  }
}

StepStats Workers::Gradients(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                             const implicit::Communicator& comm, Vector<double>* gm, Vector<double>* ge) {
  const implicit::Shard mine = implicit::ShardOf(patches.cols(), comm);
  const Index B = mine.count, T = std::min<Index>(static_cast<Index>(models_.size()), B);
  std::vector<StepStats> stats(static_cast<std::size_t>(T));
  std::vector<Vector<double>> gms(stats.size()), ges(stats.size());
  std::vector<double> weight(stats.size());
  auto share = [&](long t) {
    const Index begin = mine.begin + B * t / T, end = mine.begin + B * (t + 1) / T;
    const std::size_t i = static_cast<std::size_t>(t);
    weight[i] = patch_mask.middleCols(begin, end - begin).sum();
    stats[i] = implicit_apps::Gradients(*models_[i], c, patches.middleCols(begin, end - begin),
                                        patch_mask.middleCols(begin, end - begin), &gms[i], &ges[i]);
  };
  OnEveryRank(comm, [&] { RunOnThreads(static_cast<long>(T), share); });
  // Sums weighted by masked pixels over this rank's shares, then over the ranks:
  // [w gm, w ge, w loss, w, forward converged, backward failed, backward products].
  const Index nm = main().params().size(), ne = main().energy_params().size();
  Vector<double> sums = Vector<double>::Zero(nm + ne + 5);
  double forward_iterations = 0, equilibrium_seconds = 0;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    sums.head(nm) += weight[i] * gms[i];
    sums.segment(nm, ne) += weight[i] * ges[i];
    sums.tail(5) += Eigen::Matrix<double, 5, 1>(weight[i] * stats[i].loss, weight[i],
                                                static_cast<double>(stats[i].forward_converged),
                                                static_cast<double>(stats[i].backward_failed),
                                                static_cast<double>(stats[i].backward_products));
    forward_iterations = std::max(forward_iterations, static_cast<double>(stats[i].forward_iterations));
    equilibrium_seconds = std::max(equilibrium_seconds, stats[i].equilibrium_seconds);
  }
  implicit::SumOverRanks(comm, sums);
  comm.MaxInPlace(&forward_iterations, 1);
  comm.MaxInPlace(&equilibrium_seconds, 1);
  const double total = sums(nm + ne + 1);
  *gm = sums.head(nm) / total;
  *ge = sums.segment(nm, ne) / total;
  StepStats st;
  st.loss = sums(nm + ne) / total;
  st.forward_converged = static_cast<decltype(st.forward_converged)>(sums(nm + ne + 2));
  st.backward_failed = static_cast<decltype(st.backward_failed)>(sums(nm + ne + 3));
  st.backward_products = static_cast<decltype(st.backward_products)>(sums(nm + ne + 4));
  st.forward_iterations = static_cast<decltype(st.forward_iterations)>(forward_iterations);
  st.equilibrium_seconds = equilibrium_seconds;  // the slowest share's
  return st;
}

Matrix<double> Workers::Predict(const Config& c, const Matrix<double>& patches, const Matrix<double>& patch_mask,
                                const implicit::Communicator& comm, implicit::Summary* summary) {
  const implicit::Shard mine = implicit::ShardOf(patches.cols(), comm);
  const Index B = mine.count, T = std::min<Index>(static_cast<Index>(models_.size()), B);
  std::vector<Matrix<double>> predictions(static_cast<std::size_t>(T));
  std::vector<implicit::Summary> summaries(predictions.size());
  OnEveryRank(comm, [&] {
    RunOnThreads(static_cast<long>(T), [&](long t) {
      const Index begin = mine.begin + B * t / T, end = mine.begin + B * (t + 1) / T;
      const std::size_t i = static_cast<std::size_t>(t);
      predictions[i] = implicit_apps::Predict(*models_[i], c, patches.middleCols(begin, end - begin),
                                              patch_mask.middleCols(begin, end - begin), &summaries[i]);
    });
  });
  std::vector<double> local, all;
  for (const Matrix<double>& p : predictions) local.insert(local.end(), p.data(), p.data() + p.size());
  comm.AllGather(local, &all);
  if (!c.unroll) {
    const implicit::Summary merged = implicit::MergeShardSummaries(summaries, "");
    *summary = implicit::GatherShardSummaries(merged, patches.cols(), comm);
  }
  return Eigen::Map<const Matrix<double>>(all.data(), kPatches * kPatchSize, patches.cols());
}

}  // namespace implicit_apps
