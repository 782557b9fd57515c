// The graph Energy Transformer as a node anomaly detector (implicit-graph's
// "et"): node features f_i are projected to c_i = W_in f_i in R^D, the input of
// a GraphEnergyTransformer on the graph (layers/graph_energy_transformer.h);
// the node states x* are its equilibrium, found by a forward solver through
// ImplicitLayer; the score is linear in what the readout reads: node i's
// attention and memory energy terms at the equilibrium t_i
// (GraphEnergyTransformer::NodeEnergies: one attention term per head,
// -(1/beta) lse of its scores against its neighbours, which holds log deg_i,
// then the memory terms), its state x*_i, or both: score_i = u . t_i +
// w . x*_i + b. Training minimises the same
// class-weighted logistic loss as the logistic baseline (detector_training.h)
// over the training nodes, full batch, with Adam on W_in, w, u, b and the ET's
// W_K, W_Q, Xi; the gradients of W_K, W_Q, Xi and of the input c (hence W_in)
// come from the implicit-function-theorem backward pass, never from unrolling
// (the terms' own dependence on x* and theta enters through their
// vector-Jacobian product).
// Early stopping keeps the parameters with the best validation AUROC. A solve
// that does not converge in a later epoch ends training there (reported in
// the Result); in the first epoch it is an error.
//
//   EtDetector::Options o;               // D 16, 2 heads of 8, 32 memories, ...
//   EtDetector::Result r = EtDetector(o).Train(graph, x, anomalous, split);
#pragma once

#include "graph/logistic_detector.h"

#include <implicit/core/classification_metrics.h>
#include <implicit/core/graph_data.h>
#include <implicit/core/optimizers.h>
#include <implicit/core/parameters.h>
#include <implicit/diff/implicit_diff.h>
#include <implicit/layers/graph_energy_transformer.h>
#include <implicit/solvers/registry.h>

#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

// What the ET detector's linear score reads of node i at the equilibrium.
enum class EtReadout {
  kEnergies,        // its attention and memory energy terms t_i (default: see the README)
  kStates,          // its state x*_i
  kStatesEnergies,  // both
};

class EtDetector {
 public:
  struct Options {
    implicit::GraphEnergyTransformerOptions energy = DefaultEnergy();
    double step = 0.5;               // the ET map x <- x - step dE/dg
    std::string solver = "broyden";  // forward solver (registry name): Anderson stagnates on larger ETs (README)
    double tolerance = 1e-6;         // forward and adjoint tolerance
    int max_iterations = 1000;
    LogisticDetector::Options training;  // epochs, learning rate, weight decay, patience
    unsigned seed = 1;               // initial weights
    double init_scale = 0.1;         // W_K, W_Q, Xi ~ N(0, (init_scale / sqrt(D))^2): a weak start keeps the map contractive
    EtReadout readout = EtReadout::kEnergies;
  };
  struct Result : TrainingResult {
    double forward_iterations = 0;   // mean per epoch
    double backward_iterations = 0;  // mean per epoch
    // > 0: the epoch whose forward or adjoint solve did not converge; training
    // stopped there with the best parameters before it (reason in stop_reason).
    int stopped_at_epoch = 0;
    std::string stop_reason;
  };
  // A forward or adjoint solve that did not converge.
  struct SolveFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  static implicit::GraphEnergyTransformerOptions DefaultEnergy() {
    implicit::GraphEnergyTransformerOptions e;
    e.node_dim = 16;
    e.num_heads = 2;
    e.head_dim = 8;
    e.num_memories = 32;
    e.eps = 1.0;  // LayerNorm variance floor: a large one keeps the equilibrium well conditioned
    return e;
  }

  explicit EtDetector(const Options& options) : options_(options) {}

  // x: F x N standardised node features; anomalous: N labels 0/1.
  Result Train(const implicit::GraphDataset& g, const implicit::Matrix<double>& x,
               const std::vector<int>& anomalous, const implicit::DataSplit& split) const {
    using implicit::Index;
    using implicit::Matrix;
    const Index n = g.num_nodes(), D = options_.energy.node_dim, F = x.rows();
    implicit::GraphEnergyTransformer<double> et(options_.energy, g.row_offsets, g.neighbors);
    et.Initialize(options_.seed, options_.init_scale / std::sqrt(static_cast<double>(D)));
    implicit::GraphEnergyTransformerMap<double> map(et, options_.step);
    implicit::SolverOptions solve;
    solve.absolute_tolerance = options_.tolerance;
    solve.max_iterations = options_.max_iterations;
    const auto solver = implicit::MakeSolver<double>(options_.solver, {}, solve);
    implicit::BackwardOptions backward;
    backward.tolerance = options_.tolerance;
    implicit::ImplicitLayer<double> layer(map, *solver, backward);

    const bool states = options_.readout != EtReadout::kEnergies;
    // The terms read: the forces' (attention and memory) rows [first, T) of each node.
    const Index T = et.num_node_terms(), first = et.kFirstHeadTerm;
    const Index read = options_.readout != EtReadout::kStates ? T - first : 0;
    implicit::ParameterSet<double> head;  // W_in, w, u, b (w or u empty when not read)
    head.Add("W_in", D, F);
    head.Add("w", states ? D : 0, 1);
    head.Add("u", read, 1);
    head.Add("b", 1, 1);
    std::mt19937 random(options_.seed + 1);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (Index k = 0; k < D * F + (states ? D : 0); ++k)
      head.values()(k) = normal(random) / std::sqrt(static_cast<double>(F));
    implicit::AdamOptimizer<double>::Options adam_options;
    adam_options.learning_rate = options_.training.learning_rate;
    adam_options.weight_decay = options_.training.weight_decay;
    implicit::AdamOptimizer<double> adam_head(adam_options), adam_et(adam_options);
    const WeightedLogisticLoss loss(anomalous, split.train);
    EarlyStopping stopping(options_.training.patience);

    Result result;
    implicit::Vector<double> best_head = head.values(), best_et = et.parameters()->values();
    Matrix<double> state, terms;
    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= options_.training.epochs; ++epoch) {
      // Epoch e scores the parameters after e - 1 steps, then takes step e.
      std::vector<double> scores;
      implicit::Vector<double> grad_head = implicit::Vector<double>::Zero(head.size());
      implicit::Vector<double> grad_et;
      try {
        scores = Forward(head, x, &et, &layer, &state, &terms, &result.forward_iterations);
        if (stopping.Improved(epoch, ValidationAuroc(scores, anomalous, split))) {
          best_head = head.values();
          best_et = et.parameters()->values();
        } else if (stopping.ShouldStop(epoch)) {
          break;
        }
        // Loss gradient: dL/dscore_i on the training nodes.
        Matrix<double> grad_state = Matrix<double>::Zero(n * D, 1);
        Matrix<double> grad_terms = Matrix<double>::Zero(read > 0 ? n * T : 0, 1);
        const auto w = head.Block("w"), u = head.Block("u");
        auto grad_w = head.BlockOf(grad_head, "w"), grad_u = head.BlockOf(grad_head, "u");
        double& grad_b = head.BlockOf(grad_head, "b")(0, 0);
        for (std::size_t k = 0; k < split.train.size(); ++k) {
          const Index i = split.train[k];
          const double g_score = loss.Derivative(k, scores[i]) / loss.total_weight();
          if (states) {
            grad_state.col(0).segment(i * D, D) += g_score * w;
            grad_w += g_score * state.col(0).segment(i * D, D);
          }
          if (read > 0) {  // (an empty segment past the end of an empty matrix is an Eigen assertion)
            grad_terms.col(0).segment(i * T + first, read) += g_score * u;
            grad_u += g_score * terms.col(0).segment(i * T + first, read);
          }
          grad_b += g_score;
        }
        // The terms' own derivatives: dL/dx*, and dL/dtheta, dL/dc beside the IFT's.
        implicit::Vector<double> grad_et_direct = implicit::Vector<double>::Zero(et.num_parameters());
        Matrix<double> grad_c = Matrix<double>::Zero(n * D, 1);
        if (read > 0) {
          Matrix<double> dx(n * D, 1);
          et.NodeEnergiesVectorJacobianProduct(state, grad_terms, dx, grad_et_direct, &grad_c);
          grad_state += dx;
        }
        const implicit::BackwardResult<double> back = layer.Backward(grad_state);
        if (!back.ok())
          throw SolveFailure("the ET's adjoint solve did not converge, residual " +
                             std::to_string(back.summary.relative_residual));
        result.backward_iterations += back.summary.iterations;
        // dL/dW_in = sum_i dL/dc_i f_i^T.
        grad_c += back.input_gradient;
        const Eigen::Map<const Matrix<double>> dc(grad_c.data(), D, n);
        head.BlockOf(grad_head, "W_in") += dc * x.transpose();
        grad_et = back.parameter_gradient + grad_et_direct;
      } catch (const SolveFailure& e) {
        if (epoch == 1) throw;  // no trained parameters to fall back on
        result.stopped_at_epoch = epoch;
        result.stop_reason = e.what();
        break;
      }
      adam_head.Step(head, grad_head);
      adam_et.Step(*et.parameters(), grad_et);
    }
    stopping.Report(start, &result);
    result.forward_iterations /= result.epochs_run;
    result.backward_iterations /= result.epochs_run;
    head.values() = best_head;
    et.parameters()->values() = best_et;
    double final_iterations = 0;
    result.scores = Forward(head, x, &et, &layer, &state, &terms, &final_iterations);
    return result;
  }

 private:
  // Solves for the equilibrium with input c = W_in x, fills its node terms
  // (when the head reads them) and returns every node's score.
  std::vector<double> Forward(const implicit::ParameterSet<double>& head, const implicit::Matrix<double>& x,
                              implicit::GraphEnergyTransformer<double>* et,
                              implicit::ImplicitLayer<double>* layer, implicit::Matrix<double>* state,
                              implicit::Matrix<double>* terms, double* iterations) const {
    using implicit::Index;
    using implicit::Matrix;
    const Index n = x.cols(), D = et->node_dim(), T = et->num_node_terms(), first = et->kFirstHeadTerm,
                read = head.Block("u").rows();
    const bool states = head.Block("w").rows() > 0;
    Matrix<double> c = head.Block("W_in") * x;  // D x N, node i = column i
    c.resize(n * D, 1);           // column-major: node i at rows i*D .. i*D+D-1
    et->SetInput(c);
    *state = c;
    const implicit::Summary summary = layer->Forward(*state);
    if (!summary.IsConverged())
      throw SolveFailure(std::string("the ET's forward solve ended ") +
                               implicit::TerminationTypeToString(summary.termination_type) + " after " +
                               std::to_string(summary.iterations) + " iterations, residual " +
                               std::to_string(summary.absolute_residual) + " (try --solver, --et-step, --max-iter)");
    *iterations += summary.iterations;
    terms->resize(read > 0 ? n * T : 0, 1);
    if (read > 0) et->NodeEnergies(*state, *terms);
    const auto w = head.Block("w"), u = head.Block("u");
    const double b = head.Block("b")(0, 0);
    std::vector<double> scores(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i)
      scores[i] = (states ? w.col(0).dot(state->col(0).segment(i * D, D)) : 0.0) +
                  (read > 0 ? u.col(0).dot(terms->col(0).segment(i * T + first, read)) : 0.0) + b;
    return scores;
  }

  Options options_;
};

}  // namespace implicit_apps
