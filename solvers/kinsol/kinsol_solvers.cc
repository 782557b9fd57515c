// implicit::kinsol with SUNDIALS KINSOL: each sample's system handed to
// KINSol through the per-sample driver (internal/per_sample_backend.h).
#include <implicit/solvers/internal/option_fields.h>
#include <implicit/solvers/internal/per_sample_backend.h>
#include <implicit/solvers/kinsol.h>
#include <implicit/solvers/registry.h>

#include <kinsol/kinsol.h>
#include <nvector/nvector_serial.h>
#include <sundials/sundials_context.h>
#include <sundials/sundials_version.h>
#include <sunlinsol/sunlinsol_spgmr.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace implicit {
namespace kinsol {
namespace {

// What KINSOL's callbacks reach through user_data.
template <typename Scalar>
struct CallbackData {
  internal::SampleProblem<Scalar>* problem;
  bool root_form;                // F(u) = u - f(u) (Newton); else G(u) = f(u) (fixed point)
  std::string error;             // KINSOL's last error message
  std::exception_ptr exception;  // thrown by the map: KINSOL is stopped, KINSolve rethrows it
};

// KINSOL's return values: 0 success, > 0 recoverable (KINSOL may retry with a
// shorter step), < 0 unrecoverable. A failed evaluation is unrecoverable:
// the driver has recorded why (non-finite, diverged, budget).
template <typename Scalar>
int SystemFunction(N_Vector u, N_Vector out, void* user_data) {
  auto* data = static_cast<CallbackData<Scalar>*>(user_data);
  const double* uu = N_VGetArrayPointer(u);
  double* g = N_VGetArrayPointer(out);
  try {
    if (!data->problem->Evaluate(uu, g)) return -1;
  } catch (...) {  // never through KINSOL's C frames
    data->exception = std::current_exception();
    return -1;
  }
  if (data->root_form) {
    for (Index i = 0; i < data->problem->dimension(); ++i) g[i] = uu[i] - g[i];
  }
  return 0;
}

// J_F v = v - J_f v for F(u) = u - f(u).
template <typename Scalar>
int JacobianTimesVector(N_Vector v, N_Vector jv, N_Vector u, sunbooleantype*, void* user_data) {
  auto* data = static_cast<CallbackData<Scalar>*>(user_data);
  const double* vv = N_VGetArrayPointer(v);
  double* out = N_VGetArrayPointer(jv);
  try {
    if (!data->problem->JacobianVectorProduct(N_VGetArrayPointer(u), vv, out)) return -1;
  } catch (...) {
    data->exception = std::current_exception();
    return -1;
  }
  for (Index i = 0; i < data->problem->dimension(); ++i) out[i] = vv[i] - out[i];
  return 0;
}

template <typename Scalar>
void ErrorHandler(int, const char*, const char*, char* message, void* user_data) {
  static_cast<CallbackData<Scalar>*>(user_data)->error = message;
}

const char* FlagName(int flag) {
  switch (flag) {
    case KIN_SUCCESS: return "KIN_SUCCESS";
    case KIN_INITIAL_GUESS_OK: return "KIN_INITIAL_GUESS_OK";
    case KIN_STEP_LT_STPTOL: return "KIN_STEP_LT_STPTOL";
    case KIN_LINESEARCH_NONCONV: return "KIN_LINESEARCH_NONCONV";
    case KIN_MAXITER_REACHED: return "KIN_MAXITER_REACHED";
    case KIN_MXNEWT_5X_EXCEEDED: return "KIN_MXNEWT_5X_EXCEEDED";
    case KIN_LINESEARCH_BCFAIL: return "KIN_LINESEARCH_BCFAIL";
    case KIN_LINSOLV_NO_RECOVERY: return "KIN_LINSOLV_NO_RECOVERY";
    case KIN_LINIT_FAIL: return "KIN_LINIT_FAIL";
    case KIN_LSETUP_FAIL: return "KIN_LSETUP_FAIL";
    case KIN_LSOLVE_FAIL: return "KIN_LSOLVE_FAIL";
    case KIN_SYSFUNC_FAIL: return "KIN_SYSFUNC_FAIL";
    case KIN_FIRST_SYSFUNC_ERR: return "KIN_FIRST_SYSFUNC_ERR";
    case KIN_REPTD_SYSFUNC_ERR: return "KIN_REPTD_SYSFUNC_ERR";
    default: return "KINSOL error";
  }
}

// Throws std::runtime_error for a set-up call that failed (a bug or no memory).
void Check(int flag, const char* call) {
  if (flag < 0) throw std::runtime_error(std::string("KINSOL: ") + call + " failed (" + std::to_string(flag) + ")");
}

template <typename T, typename Free>
std::unique_ptr<T, Free> Own(T* p, Free free, const char* call) {
  if (p == nullptr) throw std::runtime_error(std::string("KINSOL: ") + call + " failed");
  return std::unique_ptr<T, Free>(p, free);
}

int Orthogonalization(const std::string& name) {
  if (name == "cgs2") return KIN_ORTH_CGS2;
  if (name == "dcgs2") return KIN_ORTH_DCGS2;
  return KIN_ORTH_MGS;
}

int EtaForm(const std::string& name) {
  if (name == "choice2") return KIN_ETACHOICE2;
  if (name == "constant") return KIN_ETACONSTANT;
  return KIN_ETACHOICE1;
}

// Runs KINSol on one sample from u (n doubles), leaving its final point in u.
template <typename Scalar>
internal::LibraryVerdict SolveSample(const typename KinsolSolver<Scalar>::Options& o, SUNContext context,
                                     internal::SampleProblem<Scalar>& problem, double* u) {
  const sunindextype n = static_cast<sunindextype>(problem.dimension());
  const bool newton = o.method == Method::kNewtonGmres;
  CallbackData<Scalar> data{&problem, newton, {}, nullptr};

  auto free_vector = [](N_Vector v) { N_VDestroy(v); };
  auto uu = Own(N_VMake_Serial(n, u, context), free_vector, "N_VMake_Serial");
  auto scale = Own(N_VNew_Serial(n, context), free_vector, "N_VNew_Serial");
  N_VConst(1.0, scale.get());
  // Declared before KINSOL's memory, so freed after it (KINFree first, as SUNDIALS documents).
  std::unique_ptr<_generic_SUNLinearSolver, int (*)(SUNLinearSolver)> linear(nullptr, SUNLinSolFree);
  auto free_kinsol = [](void* mem) { KINFree(&mem); };
  auto kin = Own(KINCreate(context), free_kinsol, "KINCreate");
  void* mem = kin.get();
  Check(KINSetErrHandlerFn(mem, ErrorHandler<Scalar>, &data), "KINSetErrHandlerFn");
  if (o.method == Method::kAnderson) Check(KINSetMAA(mem, o.memory), "KINSetMAA");  // before KINInit
  Check(KINInit(mem, SystemFunction<Scalar>, uu.get()), "KINInit");
  Check(KINSetUserData(mem, &data), "KINSetUserData");
  Check(KINSetNumMaxIters(mem, o.max_iterations), "KINSetNumMaxIters");
  // |F|_inf <= tol / sqrt(n) implies |F|_2 <= tol, libimplicit's absolute rule.
  Check(KINSetFuncNormTol(mem, o.absolute_tolerance / std::sqrt(static_cast<double>(n))), "KINSetFuncNormTol");

  int strategy = KIN_FP;
  if (o.method == Method::kAnderson) {
    Check(KINSetDampingAA(mem, o.damping), "KINSetDampingAA");
    Check(KINSetDelayAA(mem, o.delay), "KINSetDelayAA");
    Check(KINSetOrthAA(mem, Orthogonalization(o.orthogonalization)), "KINSetOrthAA");
  } else if (o.method == Method::kPicard) {
    Check(KINSetDamping(mem, o.damping), "KINSetDamping");
  } else {
    strategy = o.globalization == "none" ? KIN_NONE : KIN_LINESEARCH;
    linear.reset(SUNLinSol_SPGMR(uu.get(), SUN_PREC_NONE, o.krylov_dimension, context));
    if (!linear) throw std::runtime_error("KINSOL: SUNLinSol_SPGMR failed");
    Check(SUNLinSol_SPGMRSetMaxRestarts(linear.get(), o.max_restarts), "SUNLinSol_SPGMRSetMaxRestarts");
    Check(KINSetLinearSolver(mem, linear.get(), nullptr), "KINSetLinearSolver");
    if (o.jacobian_products && problem.HasJacobianProducts())
      Check(KINSetJacTimesVecFn(mem, JacobianTimesVector<Scalar>), "KINSetJacTimesVecFn");
    double start_norm = 0.0;
    for (sunindextype i = 0; i < n; ++i) start_norm += u[i] * u[i];
    const double max_step = o.max_newton_step > 0.0
                                ? o.max_newton_step
                                : 1000.0 * std::max(std::sqrt(start_norm), std::sqrt(static_cast<double>(n)));
    Check(KINSetMaxNewtonStep(mem, max_step), "KINSetMaxNewtonStep");
    Check(KINSetEtaForm(mem, EtaForm(o.forcing_term)), "KINSetEtaForm");
    if (o.forcing_term == "constant") Check(KINSetEtaConstValue(mem, o.forcing_constant), "KINSetEtaConstValue");
  }

  const int flag = KINSol(mem, uu.get(), strategy, scale.get(), scale.get());
  if (data.exception) std::rethrow_exception(data.exception);
  long iterations = 0;
  KINGetNumNonlinSolvIters(mem, &iterations);
  internal::LibraryVerdict verdict;
  verdict.iterations = static_cast<int>(iterations);
  verdict.converged = flag == KIN_SUCCESS || flag == KIN_INITIAL_GUESS_OK;
  verdict.reason = FlagName(flag);
  if (flag == KIN_MAXITER_REACHED) {
    verdict.failure = TerminationType::kMaxIterations;
  } else if (flag == KIN_STEP_LT_STPTOL) {
    verdict.failure = TerminationType::kStalled;
  } else if (!verdict.converged && !data.error.empty()) {
    verdict.reason += std::string(" (") + data.error + ")";
  }
  return verdict;
}

// ---- registration ------------------------------------------------------------

template <typename S>
internal::OptionFields<typename KinsolSolver<S>::Options> Fields(Method method) {
  using O = typename KinsolSolver<S>::Options;
  switch (method) {
    case Method::kPicard: return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(damping)});
    case Method::kAnderson:
      return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(damping),
                                            IMPLICIT_OPTION_FIELD(delay), IMPLICIT_OPTION_FIELD(orthogonalization)});
    case Method::kNewtonGmres:
      return internal::WithSharedFields<O>(
          {IMPLICIT_OPTION_FIELD(globalization), IMPLICIT_OPTION_FIELD(krylov_dimension),
           IMPLICIT_OPTION_FIELD(max_restarts), IMPLICIT_OPTION_FIELD(forcing_term),
           IMPLICIT_OPTION_FIELD(forcing_constant), IMPLICIT_OPTION_FIELD(jacobian_products),
           IMPLICIT_OPTION_FIELD(max_newton_step)});
  }
  return {};
}

}  // namespace

bool Available(std::string* why) {
  if (why != nullptr) why->clear();
  return true;
}

std::string Version() {
  char version[32] = {0};
  SUNDIALSGetVersion(version, sizeof(version));
  return version;
}

void RegisterSolvers() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::RegisterBackendSolvers<KinsolSolver>("SUNDIALS KINSOL " + Version(),
                                                   {Method::kPicard, Method::kAnderson, Method::kNewtonGmres},
                                                   &Fields<float>, &Fields<double>);
  });
}

template <typename Scalar>
Summary KinsolSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  SUNContext context = nullptr;
  Check(SUNContext_Create(nullptr, &context), "SUNContext_Create");
  struct FreeContext {
    SUNContext context;
    ~FreeContext() { SUNContext_Free(&context); }
  } free_context{context};
  return internal::SolvePerSample<Scalar>(
      name(), options_, map, z,
      [&](internal::SampleProblem<Scalar>& problem, double* u) { return SolveSample<Scalar>(options_, context, problem, u); });
}

template class KinsolSolver<float>;
template class KinsolSolver<double>;

}  // namespace kinsol
}  // namespace implicit
