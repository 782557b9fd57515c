// The graph Energy Transformer as a node anomaly detector (implicit-graph's
// "et"): node features f_i (with Options::input_hops = K > 0, by default 2, f_i
// and its K rounds of the GCN's propagation, node_features.h) are projected to
// c_i = W_in f_i in R^D, the input of
// a GraphEnergyTransformer on the graph (layers/graph_energy_transformer.h);
// the node states x* are its equilibrium, found by a forward solver through
// ImplicitLayer; the score is linear in what the readout reads: node i's
// attention and memory energy terms at the equilibrium t_i
// (GraphEnergyTransformer::NodeEnergies: one attention term per head,
// -(1/beta) lse of its scores against its neighbours, which holds log deg_i,
// then the memory terms), its state x*_i, or both; r_i denotes what is read.
// The score is linear in it, score_i = w . r_i + b, or, with
// Options::readout_hidden = H > 0, passes one hidden layer of H ReLU units (as
// the GCN baseline's does): score_i = w . relu(W1 r_i + b1) + b. Training
// minimises the same class-weighted logistic loss as the logistic baseline
// (detector_training.h) over the training nodes, full batch, with Adam on W_in,
// the readout's weights and the ET's W_K, W_Q, Xi; the gradients of W_K, W_Q,
// Xi and of the input c (hence W_in)
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
#include "graph/node_features.h"

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

// What the ET detector's score reads of node i at the equilibrium.
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
    int readout_hidden = 0;          // 0: linear score; H > 0: one hidden layer of H ReLU units
    // K > 0: W_in projects [f_i, (S f)_i, ..., (S^K f)_i], the features with
    // K rounds of the GCN's propagation (node_features.h); 0: f_i alone.
    // 2, what the GCN baseline aggregates, by default (README: inj_cora).
    int input_hops = 2;
  };
  struct Result : TrainingResult {
    double forward_iterations = 0;   // mean per epoch
    double backward_iterations = 0;  // mean per epoch
    // > 0: the epoch whose forward or adjoint solve did not converge; training
    // stopped there with the best parameters before it (reason in stop_reason).
    int stopped_at_epoch = 0;
    std::string stop_reason;
  };
  // A forward or adjoint solve that did not converge; non_finite when it met
  // NaN or inf (after a diverging step: the divergence rule's case).
  struct SolveFailure : std::runtime_error {
    SolveFailure(const std::string& what, bool non_finite = false)
        : std::runtime_error(what), non_finite(non_finite) {}
    bool non_finite;
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

  // What the score reads of each node (its state, its energy terms, or both:
  // R values, node i's in column i of an R x N matrix) and the map from them to
  // the score: linear (hidden = 0) or through one hidden ReLU layer.
  class Readout {
   public:
    using Index = implicit::Index;
    using Matrix = implicit::Matrix<double>;

    Readout(EtReadout what, const implicit::GraphEnergyTransformer<double>& et, Index hidden)
        : node_dim_(et.node_dim()),
          num_terms_(et.num_node_terms()),
          first_term_(et.kFirstHeadTerm),
          states_(what != EtReadout::kEnergies ? node_dim_ : 0),
          terms_(what != EtReadout::kStates ? num_terms_ - first_term_ : 0),
          hidden_(hidden) {
      if (hidden < 0) throw std::invalid_argument("EtDetector: readout_hidden must be >= 0");
    }
    Index terms() const { return terms_; }

    // Linear: w (R x 1), b. Hidden: W1 (H x R), b1 (H x 1), w (H x 1), b.
    void AddParameters(implicit::ParameterSet<double>* head) const {
      if (hidden_ > 0) {
        head->Add("W1", hidden_, states_ + terms_);
        head->Add("b1", hidden_, 1);
      }
      head->Add("w", hidden_ > 0 ? hidden_ : states_ + terms_, 1);
      head->Add("b", 1, 1);
    }
    // Linear: the state weights ~ N(0, 1/scale^2), the term weights zero.
    // Hidden: W1 and w ~ N(0, 1/fan_in), biases zero.
    void Initialize(implicit::ParameterSet<double>* head, std::mt19937* random,
                    std::normal_distribution<double>* normal, double scale) const {
      const auto fill = [&](auto block, double s) {
        for (Index k = 0; k < block.size(); ++k) block.data()[k] = (*normal)(*random) / s;
      };
      if (hidden_ == 0) {
        fill(head->Block("w").topRows(states_), scale);
        return;
      }
      fill(head->Block("W1"), std::sqrt(static_cast<double>(states_ + terms_)));
      fill(head->Block("w"), std::sqrt(static_cast<double>(hidden_)));
    }
    // R x N: node i's state, then its terms.
    Matrix Gather(const Matrix& state, const Matrix& terms) const {
      const Index n = state.rows() / node_dim_;
      Matrix read(states_ + terms_, n);
      for (Index i = 0; i < n; ++i) {
        if (states_ > 0) read.col(i).head(states_) = state.col(0).segment(i * node_dim_, node_dim_);
        if (terms_ > 0) read.col(i).tail(terms_) = terms.col(0).segment(i * num_terms_ + first_term_, terms_);
      }
      return read;
    }
    // The inverse of Gather's layout: adds column i's parts to node i's rows.
    void Scatter(const Matrix& grad_read, Matrix* grad_state, Matrix* grad_terms) const {
      for (Index i = 0; i < grad_read.cols(); ++i) {
        if (states_ > 0) grad_state->col(0).segment(i * node_dim_, node_dim_) += grad_read.col(i).head(states_);
        if (terms_ > 0)
          grad_terms->col(0).segment(i * num_terms_ + first_term_, terms_) += grad_read.col(i).tail(terms_);
      }
    }
    std::vector<double> Scores(const implicit::ParameterSet<double>& head, const Matrix& read) const {
      const auto w = head.Block("w");
      const double b = head.Block("b")(0, 0);
      std::vector<double> scores(static_cast<std::size_t>(read.cols()));
      if (hidden_ > 0) {
        const auto W1 = head.Block("W1"), b1 = head.Block("b1");
        for (Index i = 0; i < read.cols(); ++i) scores[i] = w.col(0).dot(Hidden(W1, b1, read.col(i)).cwiseMax(0.0)) + b;
        return scores;
      }
      for (Index i = 0; i < read.cols(); ++i)  // (the state and term parts summed apart, as before the hidden layer existed)
        scores[i] = (states_ > 0 ? w.col(0).head(states_).dot(read.col(i).head(states_)) : 0.0) +
                    (terms_ > 0 ? w.col(0).tail(terms_).dot(read.col(i).tail(terms_)) : 0.0) + b;
      return scores;
    }
    // Adds dL/d(readout weights) to grad_head for grad_scores[k] = dL/dscore of
    // node nodes[k]; returns dL/dread (R x N, zero in the other columns).
    Matrix Backward(const implicit::ParameterSet<double>& head, const Matrix& read, const std::vector<Index>& nodes,
                    const std::vector<double>& grad_scores, implicit::Vector<double>* grad_head) const {
      const auto w = head.Block("w");
      auto grad_w = head.BlockOf(*grad_head, "w");
      double& grad_b = head.BlockOf(*grad_head, "b")(0, 0);
      Matrix grad_read = Matrix::Zero(read.rows(), read.cols());
      if (hidden_ == 0) {
        for (std::size_t k = 0; k < nodes.size(); ++k) {
          const Index i = nodes[k];
          const double g = grad_scores[k];
          grad_b += g;
          grad_w += g * read.col(i);
          grad_read.col(i) = g * w;
        }
        return grad_read;
      }
      // (the pre-activations again, as Scores had them: cheap next to a solve)
      const auto W1 = head.Block("W1"), b1 = head.Block("b1");
      auto grad_W1 = head.BlockOf(*grad_head, "W1"), grad_b1 = head.BlockOf(*grad_head, "b1");
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        const Index i = nodes[k];
        const double g = grad_scores[k];
        grad_b += g;
        const implicit::Vector<double> pre = Hidden(W1, b1, read.col(i));
        grad_w += g * pre.cwiseMax(0.0);
        const implicit::Vector<double> grad_pre = (g * w).cwiseProduct((pre.array() > 0.0).cast<double>().matrix());
        grad_W1 += grad_pre * read.col(i).transpose();
        grad_b1 += grad_pre;
        grad_read.col(i) = W1.transpose() * grad_pre;
      }
      return grad_read;
    }

   private:
    using ConstBlock = implicit::ParameterSet<double>::ConstBlockMap;
    // W1 r + b1 for one node's r, before the ReLU.
    static implicit::Vector<double> Hidden(const ConstBlock& W1, const ConstBlock& b1,
                                           const Eigen::Ref<const implicit::Vector<double>>& r) {
      return W1 * r + b1.col(0);
    }

    Index node_dim_, num_terms_, first_term_, states_, terms_, hidden_;
  };

  explicit EtDetector(const Options& options) : options_(options) {}

  // features: standardised node features (one column per node); anomalous: N labels 0/1.
  Result Train(const implicit::GraphDataset& g, const implicit::Matrix<double>& features,
               const std::vector<int>& anomalous, const implicit::DataSplit& split) const {
    using implicit::Index;
    using implicit::Matrix;
    const Matrix<double> x = WithPropagated(g, features, options_.input_hops);  // F x N: what W_in projects
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

    const Index T = et.num_node_terms();
    const Readout readout(options_.readout, et, options_.readout_hidden);
    implicit::ParameterSet<double> head;  // W_in, then the readout's weights
    head.Add("W_in", D, F);
    readout.AddParameters(&head);
    std::mt19937 random(options_.seed + 1);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (Index k = 0; k < D * F; ++k) head.values()(k) = normal(random) / std::sqrt(static_cast<double>(F));
    readout.Initialize(&head, &random, &normal, std::sqrt(static_cast<double>(F)));
    implicit::AdamOptimizer<double>::Options adam_options;
    adam_options.learning_rate = options_.training.learning_rate;
    adam_options.weight_decay = options_.training.weight_decay;
    implicit::AdamOptimizer<double> adam_head(adam_options), adam_et(adam_options);
    const WeightedLogisticLoss loss(anomalous, split.train);
    EarlyStopping stopping(options_.training.patience);

    Result result;
    implicit::Vector<double> best_head = head.values(), best_et = et.parameters()->values();
    Matrix<double> state, terms, read;
    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= options_.training.epochs; ++epoch) {
      // Epoch e scores the parameters after e - 1 steps, then takes step e.
      std::vector<double> scores;
      implicit::Vector<double> grad_head = implicit::Vector<double>::Zero(head.size());
      implicit::Vector<double> grad_et;
      try {
        scores = Forward(head, readout, x, &et, &layer, &state, &terms, &read, &result.forward_iterations);
        if (Diverged(epoch, scores, &result)) {
          if (epoch == 1) throw std::runtime_error("the untrained ET's scores are not finite");
          break;
        }
        if (stopping.Improved(epoch, ValidationAuroc(scores, anomalous, split))) {
          best_head = head.values();
          best_et = et.parameters()->values();
        } else if (stopping.ShouldStop(epoch)) {
          break;
        }
        // Loss gradient: dL/dscore_i on the training nodes, then through the readout.
        std::vector<double> grad_scores(split.train.size());
        for (std::size_t k = 0; k < split.train.size(); ++k)
          grad_scores[k] = loss.Derivative(k, scores[split.train[k]]) / loss.total_weight();
        const Matrix<double> grad_read = readout.Backward(head, read, split.train, grad_scores, &grad_head);
        Matrix<double> grad_state = Matrix<double>::Zero(n * D, 1);
        Matrix<double> grad_terms = Matrix<double>::Zero(readout.terms() > 0 ? n * T : 0, 1);
        readout.Scatter(grad_read, &grad_state, &grad_terms);
        // The terms' own derivatives: dL/dx*, and dL/dtheta, dL/dc beside the IFT's.
        implicit::Vector<double> grad_et_direct = implicit::Vector<double>::Zero(et.num_parameters());
        Matrix<double> grad_c = Matrix<double>::Zero(n * D, 1);
        if (readout.terms() > 0) {
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
        if (e.non_finite) {     // the last step diverged (detector_training.h's rule)
          result.diverged_at_epoch = epoch;
        } else {
          result.stopped_at_epoch = epoch;
          result.stop_reason = e.what();
        }
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
    result.scores = Forward(head, readout, x, &et, &layer, &state, &terms, &read, &final_iterations);
    return result;
  }

 private:
  // Solves for the equilibrium with input c = W_in x, fills its node terms
  // (when the readout reads them) and what the readout reads, and returns
  // every node's score.
  std::vector<double> Forward(const implicit::ParameterSet<double>& head, const Readout& readout,
                              const implicit::Matrix<double>& x, implicit::GraphEnergyTransformer<double>* et,
                              implicit::ImplicitLayer<double>* layer, implicit::Matrix<double>* state,
                              implicit::Matrix<double>* terms, implicit::Matrix<double>* read,
                              double* iterations) const {
    using implicit::Index;
    using implicit::Matrix;
    const Index n = x.cols(), D = et->node_dim(), T = et->num_node_terms();
    Matrix<double> c = head.Block("W_in") * x;  // D x N, node i = column i
    c.resize(n * D, 1);           // column-major: node i at rows i*D .. i*D+D-1
    et->SetInput(c);
    *state = c;
    const implicit::Summary summary = layer->Forward(*state);
    if (!summary.IsConverged())
      throw SolveFailure(std::string("the ET's forward solve ended ") +
                               implicit::TerminationTypeToString(summary.termination_type) + " after " +
                               std::to_string(summary.iterations) + " iterations, residual " +
                               std::to_string(summary.absolute_residual) + " (try --solver, --et-step, --max-iter)",
                         summary.termination_type == implicit::TerminationType::kNonFinite);
    *iterations += summary.iterations;
    terms->resize(readout.terms() > 0 ? n * T : 0, 1);
    if (readout.terms() > 0) et->NodeEnergies(*state, *terms);
    *read = readout.Gather(*state, *terms);
    return readout.Scores(head, *read);
  }

  Options options_;
};

}  // namespace implicit_apps
