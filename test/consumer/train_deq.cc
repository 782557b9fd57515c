// Training through an equilibrium: fits a DEQ layer z* = f(z*; x, theta) to
// the equilibria of a teacher layer, with implicit-function-theorem gradients
// and Adam. This is the example in the README ("Training through an
// equilibrium"); CI builds it against the installed package and runs it.
// Exits non-zero unless the loss fell at least 10-fold and every forward and
// backward solve succeeded.
#include <implicit/diff/implicit_diff.h>
#include <implicit/core/losses.h>
#include <implicit/core/optimizers.h>
#include <implicit/layers/deq_layer.h>
#include <implicit/solvers/anderson.h>

#include <cstdio>

int main() {
  using implicit::Matrix;
  const int n = 8, p = 4, batch = 64;

  // The layer: z = W2 tanh(W1 z + U x + b1) + b2, a contraction at start.
  implicit::MlpBlockMap<double>::Options options;
  options.state_dim = n;
  options.hidden_dim = 16;
  options.input_dim = p;
  options.activation = implicit::BlockActivation::kTanh;
  options.seed = 1;
  implicit::MlpBlockMap<double> layer_map(options);

  // Data: targets are the equilibria of a teacher layer with other weights.
  options.seed = 2;
  implicit::MlpBlockMap<double> teacher(options);
  const Matrix<double> x = Matrix<double>::Random(p, batch);
  teacher.SetInput(x);
  layer_map.SetInput(x);

  implicit::AndersonSolver<double>::Options solver_options;
  solver_options.absolute_tolerance = 1e-10;
  implicit::AndersonSolver<double> solver(solver_options);
  Matrix<double> target = Matrix<double>::Zero(n, batch);
  if (!solver.Solve(teacher, target).IsConverged()) return 1;

  implicit::ImplicitLayer<double> layer(layer_map, solver);  // IFT backward, GMRES
  implicit::AdamOptimizer<double>::Options adam_options;
  adam_options.learning_rate = 0.01;
  implicit::AdamOptimizer<double> adam(adam_options);

  double first_loss = 0, loss = 0;
  for (int step = 0; step < 300; ++step) {
    Matrix<double> z = Matrix<double>::Zero(n, batch);
    const implicit::Summary forward = layer.Forward(z);          // z <- z*
    if (!forward.IsConverged()) {
      std::printf("step %d: forward %s\n", step, forward.BriefReport().c_str());
      return 1;
    }
    Matrix<double> dloss_dz;
    loss = implicit::MeanSquaredError<double>(z, target, &dloss_dz);
    const implicit::BackwardResult<double> grad = layer.Backward(dloss_dz);
    if (!grad.ok()) {                                          // never zero gradients
      std::printf("step %d: backward %s\n", step, grad.summary.BriefReport().c_str());
      return 1;
    }
    adam.Step(*layer_map.parameters(), grad.parameter_gradient);
    if (step == 0) first_loss = loss;
    if (step % 100 == 0) std::printf("step %3d  loss %.3e\n", step, loss);
  }
  std::printf("loss %.3e -> %.3e (%.0fx lower)\n", first_loss, loss, first_loss / loss);
  return loss < first_loss / 10 ? 0 : 1;
}
