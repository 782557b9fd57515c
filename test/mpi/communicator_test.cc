// Communicator, ShardedSolve and data-parallel gradients. Run as one process
// and under `mpirun -np 2` (ctest -L mpi): every check holds for any number of
// ranks, and the sharded results are compared with single-process ones that
// each rank computes itself.
#define BOOST_TEST_MODULE communicator
#include <boost/test/unit_test.hpp>

#include <implicit/core/communicator.h>
#include <implicit/core/energy_maps.h>
#include <implicit/core/mpi.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/modern_hopfield_energy.h>
#include <implicit/solvers/anderson.h>
#include <implicit/solvers/sharded_solve.h>

#include "support/test_problems.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using implicit::Index;
using implicit::testing::RandomMatrix;
template <typename S>
using Matrix = implicit::Matrix<S>;

// MPI_COMM_WORLD when the build has MPI, else the single process.
const implicit::Communicator& Comm() {
  return implicit::mpi::Available() ? implicit::mpi::World() : implicit::SingleProcess();
}

// A Hopfield retrieval problem, the same on every rank (fixed seeds).
template <typename S>
struct Retrieval {
  static constexpr Index n = 8, patterns = 12, batch = 7;  // 7: shards of unequal size
  implicit::ModernHopfieldEnergy<S> energy;
  implicit::CccpMap<S> map;
  Matrix<S> queries;
  explicit Retrieval(bool learn_patterns = false)
      : energy(RandomMatrix<S>(n, patterns, 1, 0.6), Options(learn_patterns)),
        map(energy),
        queries(RandomMatrix<S>(n, batch, 2, 0.6)) {}
  static typename implicit::ModernHopfieldEnergy<S>::Options Options(bool learn_patterns) {
    typename implicit::ModernHopfieldEnergy<S>::Options o;
    o.beta = 1.5;
    o.learn_patterns = learn_patterns;
    return o;
  }
};

template <typename S>
implicit::AndersonSolver<S> Solver() {
  typename implicit::AndersonSolver<S>::Options o;
  o.absolute_tolerance = sizeof(S) == 8 ? 1e-12 : 1e-5;
  o.max_iterations = 500;
  return implicit::AndersonSolver<S>(o);
}

}  // namespace

BOOST_AUTO_TEST_CASE(shards_cover_the_batch_in_order_and_balanced) {
  for (Index batch = 0; batch <= 20; ++batch) {
    for (int size = 1; size <= 5; ++size) {
      Index next = 0, smallest = batch, largest = 0;
      for (int r = 0; r < size; ++r) {
        const implicit::Shard s = implicit::ShardOf(batch, r, size);
        BOOST_TEST(s.begin == next);
        next += s.count;
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
      }
      BOOST_TEST(next == batch);
      BOOST_TEST(largest - smallest <= 1);
    }
  }
  BOOST_CHECK_THROW(implicit::ShardOf(4, 2, 2), std::invalid_argument);
  BOOST_CHECK_THROW(implicit::ShardOf(-1, 0, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(collectives_sum_take_the_max_broadcast_and_gather) {
  const implicit::Communicator& comm = Comm();
  const int size = comm.size(), rank = comm.rank();
  std::vector<double> sum = {double(rank + 1), 1.0};
  comm.SumInPlace(sum.data(), 2);
  BOOST_TEST(sum[0] == size * (size + 1) / 2.0);
  BOOST_TEST(sum[1] == double(size));
  float f = 0.5f;
  comm.SumInPlace(&f, 1);
  BOOST_TEST(f == 0.5f * size);
  double largest = rank;
  comm.MaxInPlace(&largest, 1);
  BOOST_TEST(largest == double(size - 1));
  double root_value = rank == 0 ? 42.0 : -1.0;
  comm.Broadcast(&root_value, 1, 0);
  BOOST_TEST(root_value == 42.0);
  std::string text = rank == size - 1 ? "from the last rank" : std::string(18, '?');
  comm.Broadcast(text.data(), Index(text.size()), size - 1);
  BOOST_TEST(text == "from the last rank");
  std::vector<double> all;
  comm.AllGather(std::vector<double>(rank + 1, double(rank)), &all);  // rank r sends r+1 copies of r
  std::vector<double> expected;
  for (int r = 0; r < size; ++r) expected.insert(expected.end(), r + 1, double(r));
  BOOST_TEST(all == expected, boost::test_tools::per_element());
  BOOST_TEST(implicit::SumOverRanks(comm, 2.0) == 2.0 * size);
}

BOOST_AUTO_TEST_CASE(first_error_reaches_every_rank) {
  const implicit::Communicator& comm = Comm();
  BOOST_TEST(implicit::FirstError(comm, "").empty());
  const int failing = comm.size() - 1;
  const std::string mine = comm.rank() == failing ? "rank " + std::to_string(failing) + " broke" : "";
  BOOST_TEST(implicit::FirstError(comm, mine) == "rank " + std::to_string(failing) + " broke");
  // Several failing ranks: the lowest one's message.
  BOOST_TEST(implicit::FirstError(comm, "rank " + std::to_string(comm.rank())) == "rank 0");
}

template <typename S>
void CheckShardedSolveEqualsOneProcess() {
  const implicit::Communicator& comm = Comm();
  Retrieval<S> problem;
  const implicit::AndersonSolver<S> solver = Solver<S>();
  Matrix<S> alone = problem.queries;
  const implicit::Summary one = solver.Solve(problem.map, alone);
  Matrix<S> sharded = problem.queries;
  const implicit::Summary all = implicit::ShardedSolve(solver, problem.map, sharded, comm);
  BOOST_TEST(one.IsConverged());
  BOOST_TEST(all.IsConverged());
  BOOST_TEST(all.num_samples() == one.num_samples());
  const double tol = sizeof(S) == 8 ? 1e-12 : 1e-5;
  BOOST_TEST((sharded - alone).cwiseAbs().maxCoeff() <= tol);
  for (int b = 0; b < one.num_samples(); ++b) {
    BOOST_TEST(std::string(implicit::TerminationTypeToString(all.sample_status[b])) ==
               implicit::TerminationTypeToString(one.sample_status[b]));
    BOOST_TEST(all.sample_residual[b] <= solver.options().absolute_tolerance);
  }
  BOOST_TEST(all.iterations <= one.iterations);
}

BOOST_AUTO_TEST_CASE(sharded_solve_equals_the_one_process_solve) {
  CheckShardedSolveEqualsOneProcess<double>();
  CheckShardedSolveEqualsOneProcess<float>();
}

// A batch solved in three pieces (e.g. over threads), the pieces' Summaries
// merged: per-sample fields equal the whole batch's, in sample order; counts
// add up; iterations are the longest piece's; the merged status is the most
// severe of the pieces'. Gathered over the ranks, every rank's shard merged.
BOOST_AUTO_TEST_CASE(shard_summaries_merge_in_sample_order) {
  Retrieval<double> problem;
  const implicit::AndersonSolver<double> solver = Solver<double>();
  Matrix<double> whole = problem.queries;
  const implicit::Summary one = solver.Solve(problem.map, whole);
  const Index B = whole.cols();
  std::vector<implicit::Summary> pieces;
  int evaluations = 0, longest = 0;
  for (const auto& [begin, count] : std::vector<std::pair<Index, Index>>{{0, 2}, {2, B - 5}, {B - 3, 3}}) {
    Matrix<double> z = problem.queries.middleCols(begin, count);
    pieces.push_back(solver.Solve(problem.map, z));
    evaluations += pieces.back().function_evaluations;
    longest = std::max(longest, pieces.back().iterations);
  }
  const implicit::Summary merged = implicit::MergeShardSummaries(pieces, "three pieces");
  BOOST_TEST(merged.num_samples() == one.num_samples());
  BOOST_TEST(merged.sample_iterations == one.sample_iterations, boost::test_tools::per_element());
  BOOST_TEST(merged.function_evaluations == evaluations);
  BOOST_TEST(merged.iterations == longest);
  BOOST_TEST(merged.IsConverged());
  BOOST_TEST(merged.message == "three pieces");
  pieces[1].termination_type = implicit::TerminationType::kNonFinite;
  BOOST_TEST(implicit::TerminationTypeToString(implicit::MergeShardSummaries(pieces, "").termination_type) ==
             std::string("non_finite"));

  const implicit::Communicator& comm = Comm();
  const implicit::Shard mine = implicit::ShardOf(B, comm);
  Matrix<double> z = problem.queries.middleCols(mine.begin, mine.count);
  const implicit::Summary gathered = implicit::GatherShardSummaries(solver.Solve(problem.map, z), B, comm);
  BOOST_TEST(gathered.sample_iterations == one.sample_iterations, boost::test_tools::per_element());
  // A rank whose Summary does not match its shard: every rank throws, naming it.
  const int wrong = comm.size() - 1;
  implicit::Summary local = solver.Solve(problem.map, z);
  if (comm.rank() == wrong) local.sample_status.push_back(implicit::TerminationType::kConverged);
  BOOST_CHECK_EXCEPTION(implicit::GatherShardSummaries(local, B, comm), std::invalid_argument,
                        [&](const std::invalid_argument& e) {
                          return std::string(e.what()).find("rank " + std::to_string(wrong)) != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(bad_input_on_one_rank_fails_on_every_rank) {
  const implicit::Communicator& comm = Comm();
  Retrieval<double> problem;
  implicit::ModernHopfieldEnergy<double> wrong(RandomMatrix<double>(5, 3, 3));  // dimension 5, not 8
  implicit::CccpMap<double> wrong_map(wrong);
  const bool mine = comm.rank() == comm.size() - 1;
  Matrix<double> z = problem.queries;
  const std::string expected = "rank " + std::to_string(comm.size() - 1) + ": ";
  BOOST_CHECK_EXCEPTION(
      implicit::ShardedSolve(Solver<double>(), mine ? static_cast<const implicit::FixedPointMap<double>&>(wrong_map)
                                                    : problem.map, z, comm),
      std::invalid_argument, [&](const std::invalid_argument& e) {
        return std::string(e.what()).find(expected) != std::string::npos;
      });
}

// Each rank differentiates its shard; the summed gradient is the batch's.
Eigen::VectorXd ShardGradient(Retrieval<double>& p, const Matrix<double>& z_star,
                              const Matrix<double>& target, const implicit::Communicator& comm) {
  const implicit::Shard s = implicit::ShardOf(z_star.cols(), comm);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(p.energy.num_parameters());
  if (s.count > 0) {
    const Matrix<double> z = z_star.middleCols(s.begin, s.count);
    const Matrix<double> dLdz = z - target.middleCols(s.begin, s.count);
    const auto r = implicit::ImplicitBackward<double>(p.map, z, dLdz);
    BOOST_REQUIRE(r.ok());
    g = r.parameter_gradient;
  }
  implicit::SumOverRanks(comm, g);
  return g;
}

BOOST_AUTO_TEST_CASE(data_parallel_gradients_and_steps_equal_one_process) {
  const implicit::Communicator& comm = Comm();
  const implicit::Communicator& alone = implicit::SingleProcess();
  Retrieval<double> parallel(true), serial(true);
  const Matrix<double> target = RandomMatrix<double>(8, 7, 5, 0.5);
  const implicit::AndersonSolver<double> solver = Solver<double>();
  for (int step = 0; step < 4; ++step) {
    Matrix<double> z_parallel = parallel.queries, z_serial = serial.queries;
    implicit::ShardedSolve(solver, parallel.map, z_parallel, comm);
    solver.Solve(serial.map, z_serial);
    const Eigen::VectorXd g_parallel = ShardGradient(parallel, z_parallel, target, comm);
    const Eigen::VectorXd g_serial = ShardGradient(serial, z_serial, target, alone);
    BOOST_TEST((g_parallel - g_serial).norm() <= 1e-12 * g_serial.norm());
    parallel.energy.parameters()->values() -= 0.05 * g_parallel;
    serial.energy.parameters()->values() -= 0.05 * g_serial;
  }
  // Identical parameters on every rank (bit for bit), and equal to one process's.
  const Eigen::VectorXd& theta = parallel.energy.parameters()->values();
  std::vector<double> all;
  comm.AllGather(std::vector<double>(theta.data(), theta.data() + theta.size()), &all);
  for (int r = 0; r < comm.size(); ++r) {
    BOOST_TEST(std::memcmp(all.data() + r * theta.size(), theta.data(),
                           sizeof(double) * theta.size()) == 0);
  }
  const Eigen::VectorXd& theta_serial = serial.energy.parameters()->values();
  BOOST_TEST((theta - theta_serial).norm() <= 1e-12 * theta_serial.norm());
}

BOOST_AUTO_TEST_CASE(availability_is_reported) {
  std::string why;
  const bool available = implicit::mpi::Available(&why);
  BOOST_TEST(available == why.empty());
  if (!available) BOOST_CHECK_THROW(implicit::mpi::World(), std::runtime_error);
}
