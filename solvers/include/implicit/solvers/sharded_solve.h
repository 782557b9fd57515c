/// \file
/// ShardedSolve: one batch of equilibrium problems spread over the ranks of a
/// Communicator (communicator.h; over MPI: implicit::mpi::World()).
///
/// Each rank solves the columns it owns (ShardOf(batch, comm)) and then every
/// rank receives every rank's columns and per-sample results, so that all of
/// them hold the whole solved batch and one Summary in the original sample
/// order, as if one process had solved it.
///
/// \code
///   const implicit::Communicator& comm = implicit::mpi::World();
///   implicit::AndersonSolver<double> solver;
///   implicit::Summary s = implicit::ShardedSolve(solver, map, z, comm);  // z: n x B, all ranks
/// \endcode
///
/// `local_map` evaluates f on this rank's columns: for a map that is the same
/// function for every sample (SupportsSubsets()), the global map itself; for a
/// map with per-sample data (an input injection), the map built from this
/// rank's slice of that data. The merged Summary: per-sample vectors
/// concatenated in sample order; iterations and wall_time_seconds the maximum
/// over ranks (the ranks iterate in parallel); function_evaluations and
/// jacobian_products summed (batch evaluations of each rank's shard);
/// residuals the maximum; termination converged only when every sample
/// converged, else the most severe of the ranks' terminations; no trace.
/// Collective: every rank calls it with the same batch size. An exception on
/// one rank (bad input) is raised on every rank with that rank's message.
#pragma once

#include <implicit/core/communicator.h>
#include <implicit/solvers/solver.h>

#include <string>
#include <vector>

namespace implicit {

///@{
/// Collective: solves the batch z (n x B, the same B on every rank) with
/// `solver`, each rank its own shard ShardOf(B, comm), then gives every rank
/// the whole solved batch in z and the merged Summary (see sharded_solve.h).
/// (Overloads rather than a template, so that Eigen matrices and derived maps
/// convert.)
/// \param solver the forward solver every rank runs on its shard.
/// \param local_map f on this rank's columns: the global map for one that is
///        the same for every sample, else the map built from this rank's
///        slice of the per-sample data.
/// \param z n x B, the whole batch on every rank: the initial guesses on
///        entry, every rank's solved columns on return.
/// \param comm the ranks sharing the batch.
/// \return the merged Summary of all B samples, in sample order.
/// \throws std::invalid_argument on every rank, with the failing rank's
///         message, when the solve throws on any rank (e.g. bad input).
Summary ShardedSolve(const Solver<float>& solver, const FixedPointMap<float>& local_map,
                     MatrixRef<float> z, const Communicator& comm);
Summary ShardedSolve(const Solver<double>& solver, const FixedPointMap<double>& local_map,
                     MatrixRef<double> z, const Communicator& comm);
///@}

/// The Summary of one batch from the Summaries of its consecutive shards, in
/// sample order, merged as ShardedSolve merges the ranks'; `message`
/// becomes its message. E.g. a batch split over threads.
Summary MergeShardSummaries(const std::vector<Summary>& shards, const std::string& message);

/// Collective: each rank's Summary of its shard ShardOf(batch, comm) of one
/// batch, gathered and merged (MergeShardSummaries) on every rank.
/// \throws std::invalid_argument on every rank, naming the rank, when a
///         rank's `local` does not hold its shard's sample count.
Summary GatherShardSummaries(const Summary& local, Index batch, const Communicator& comm);

}  // namespace implicit
