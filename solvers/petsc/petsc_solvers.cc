// implicit::petsc with PETSc: each sample's system F(u) = u - f(u) handed to
// SNESSolve through the per-sample driver (internal/per_sample_backend.h).
//
// PETSc is not thread-safe: solves are serialised by one (recursive) mutex.
// During a solve PETSc's error handler is one that records the message instead
// of printing it; set-up failures become std::runtime_error with that message,
// a failure inside SNESSolve is that sample's kFailure. Options that PETSc
// only takes from an options database (-snes_anderson_m, ...) go through a
// private PetscOptions object per SNES, never PETSc's global database.
#include <implicit/solvers/internal/option_fields.h>
#include <implicit/solvers/internal/per_sample_backend.h>
#include <implicit/solvers/petsc.h>
#include <implicit/solvers/registry.h>

#include <petscksp.h>
#include <petscsnes.h>
#include <petscversion.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit {
namespace petsc {
namespace {

// ---- PETSc's life cycle and errors --------------------------------------------

std::recursive_mutex& PetscMutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

void FinalizeAtExit() {
  PetscBool finalized = PETSC_FALSE;
  if (PetscFinalized(&finalized) == 0 && !finalized) PetscFinalize();
}

// Initialises PETSc once per process unless the program did; throws when that
// failed or when PETSc was finalised already.
void EnsureInitialized() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    PetscBool initialized = PETSC_FALSE;
    PetscInitialized(&initialized);
    if (initialized) return;  // the program's PETSc, the program's PetscFinalize
    // Leave the program's signal handling alone (PETSc would catch SIGSEGV,
    // SIGFPE, ... with its own handler). This is the only global option set,
    // before PETSc exists, so it belongs to the PETSc we start.
    PetscOptionsSetValue(nullptr, "-no_signal_handler", nullptr);
    const PetscErrorCode code = PetscInitializeNoArguments();
    if (code != 0) {
      const char* text = nullptr;
      PetscErrorMessage(code, &text, nullptr);
      failure = std::string("PETSc: PetscInitializeNoArguments failed (") + (text ? text : "") + ", error " +
                std::to_string(code) + ")";
      return;
    }
    std::atexit(FinalizeAtExit);
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  PetscBool finalized = PETSC_FALSE;
  PetscFinalized(&finalized);
  if (finalized) throw std::runtime_error("PETSc: PetscFinalize has been called, PETSc cannot run again in this process");
}

// The message of the first error PETSc raised since the last Take().
struct ErrorRecord {
  std::string message;
  std::string Take() {
    std::string m = message.empty() ? std::string("no message") : message;
    message.clear();
    return m;
  }
};

PetscErrorCode RecordError(MPI_Comm, int line, const char* function, const char* file, PetscErrorCode code,
                           PetscErrorType type, const char* message, void* context) {
  auto* record = static_cast<ErrorRecord*>(context);
  if (type == PETSC_ERROR_INITIAL && record->message.empty()) {
    const char* generic = nullptr;
    PetscErrorMessage(code, &generic, nullptr);
    record->message = std::string(generic ? generic : "error");
    if (message != nullptr && *message != '\0' && *message != ' ') record->message += std::string(": ") + message;
    record->message += std::string(" [") + (function ? function : "?") + " at " + (file ? file : "?") + ":" +
                       std::to_string(line) + "]";
  }
  return code;
}

// PETSc's error handler for one solve: record, do not print.
class ErrorHandlerScope {
 public:
  explicit ErrorHandlerScope(ErrorRecord* record) { pushed_ = PetscPushErrorHandler(RecordError, record) == 0; }
  ~ErrorHandlerScope() {
    if (pushed_) PetscPopErrorHandler();
  }
  ErrorHandlerScope(const ErrorHandlerScope&) = delete;
  ErrorHandlerScope& operator=(const ErrorHandlerScope&) = delete;

 private:
  bool pushed_ = false;
};

// Throws std::runtime_error for a set-up call that failed (a bug or no memory).
void Check(PetscErrorCode code, const char* call, ErrorRecord& record) {
  if (code == 0) return;
  throw std::runtime_error(std::string("PETSc: ") + call + " failed: " + record.Take() + " (error " +
                           std::to_string(code) + ")");
}

// A PETSc object destroyed with its scope.
template <typename T, PetscErrorCode (*Destroy)(T*)>
struct Owned {
  T p = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (p != nullptr) Destroy(&p);
  }
};
using OwnedVec = Owned<Vec, VecDestroy>;
using OwnedMat = Owned<Mat, MatDestroy>;
using OwnedSnes = Owned<SNES, SNESDestroy>;
using OwnedOptions = Owned<PetscOptions, PetscOptionsDestroy>;

// ---- the callbacks -------------------------------------------------------------

// What SNES' callbacks reach.
template <typename Scalar>
struct CallbackData {
  internal::SampleProblem<Scalar>* problem;
  PetscInt n;
  SNES snes;                           // for the finite-difference operator's evaluations
  std::vector<double> jacobian_point;  // the iterate of the last Jacobian set-up (MatShell)
  std::exception_ptr exception;        // thrown by the map; rethrown after SNESSolve
};

void FillNaN(PetscScalar* x, PetscInt n) {
  for (PetscInt i = 0; i < n; ++i) x[i] = std::numeric_limits<double>::quiet_NaN();
}

// F(u) = u - f(u). When the driver stops the sample (non-finite, diverged,
// budget), SNES is told the point is outside F's domain (and F is NaN).
template <typename Scalar>
PetscErrorCode Residual(SNES snes, Vec x, Vec f, void* context) {
  auto* data = static_cast<CallbackData<Scalar>*>(context);
  const PetscScalar* xx = nullptr;
  PetscScalar* ff = nullptr;
  PetscErrorCode code = VecGetArrayRead(x, &xx);
  if (code != 0) return code;
  code = VecGetArray(f, &ff);
  if (code != 0) {
    VecRestoreArrayRead(x, &xx);
    return code;
  }
  bool ok = false;
  try {
    ok = data->problem->Evaluate(xx, ff);
  } catch (...) {
    data->exception = std::current_exception();
  }
  if (ok) {
    for (PetscInt i = 0; i < data->n; ++i) ff[i] = xx[i] - ff[i];
  } else {
    FillNaN(ff, data->n);
  }
  VecRestoreArray(f, &ff);
  VecRestoreArrayRead(x, &xx);
  if (data->exception) SETERRQ(PETSC_COMM_SELF, PETSC_ERR_USER, "the map threw an exception");
  if (!ok) return SNESSetFunctionDomainError(snes);
  return 0;
}

// SNES' Jacobian set-up for the MatShell: remember the iterate.
template <typename Scalar>
PetscErrorCode ShellJacobian(SNES, Vec x, Mat, Mat, void* context) {
  auto* data = static_cast<CallbackData<Scalar>*>(context);
  const PetscScalar* xx = nullptr;
  const PetscErrorCode code = VecGetArrayRead(x, &xx);
  if (code != 0) return code;
  data->jacobian_point.assign(xx, xx + data->n);
  return VecRestoreArrayRead(x, &xx);
}

// y = J_F v = v - J_f(u) v at the remembered iterate u; NaN when the product
// failed (the Krylov solve then fails and SNES stops).
template <typename Scalar>
PetscErrorCode ShellMultiply(Mat J, Vec v, Vec y) {
  void* context = nullptr;
  PetscErrorCode code = MatShellGetContext(J, &context);
  if (code != 0) return code;
  auto* data = static_cast<CallbackData<Scalar>*>(context);
  const PetscScalar* vv = nullptr;
  PetscScalar* yy = nullptr;
  code = VecGetArrayRead(v, &vv);
  if (code != 0) return code;
  code = VecGetArray(y, &yy);
  if (code != 0) {
    VecRestoreArrayRead(v, &vv);
    return code;
  }
  bool ok = false;
  try {
    ok = data->problem->JacobianVectorProduct(data->jacobian_point.data(), vv, yy);
  } catch (...) {
    data->exception = std::current_exception();
  }
  if (ok) {
    for (PetscInt i = 0; i < data->n; ++i) yy[i] = vv[i] - yy[i];
  } else {
    FillNaN(yy, data->n);
  }
  VecRestoreArray(y, &yy);
  VecRestoreArrayRead(v, &vv);
  if (data->exception) SETERRQ(PETSC_COMM_SELF, PETSC_ERR_USER, "the map threw an exception");
  return 0;
}

// The finite-difference operator's F (MatMFFDSetFunction).
template <typename Scalar>
PetscErrorCode DifferencedResidual(void* context, Vec x, Vec f) {
  auto* data = static_cast<CallbackData<Scalar>*>(context);
  return Residual<Scalar>(data->snes, x, f, context);
}

// SNES' Jacobian set-up for the finite-difference operator: differences are
// taken at the iterate x, whose F(x) SNES holds (as MatCreateSNESMF does).
PetscErrorCode DifferencedJacobian(SNES snes, Vec x, Mat J, Mat, void*) {
  Vec f = nullptr;
  PetscErrorCode code = SNESGetFunction(snes, &f, nullptr, nullptr);
  if (code == 0) code = MatMFFDSetBase(J, x, f);
  if (code == 0) code = MatAssemblyBegin(J, MAT_FINAL_ASSEMBLY);
  if (code == 0) code = MatAssemblyEnd(J, MAT_FINAL_ASSEMBLY);
  return code;
}

// ---- one sample ------------------------------------------------------------------

SNESQNType QnType(const std::string& name) {
  if (name == "broyden") return SNES_QN_BROYDEN;
  if (name == "badbroyden") return SNES_QN_BADBROYDEN;
  return SNES_QN_LBFGS;
}

SNESNCGType NcgType(const std::string& name) {
  if (name == "fr") return SNES_NCG_FR;
  if (name == "hs") return SNES_NCG_HS;
  if (name == "dy") return SNES_NCG_DY;
  if (name == "cd") return SNES_NCG_CD;
  return SNES_NCG_PRP;
}

const char* SnesType(Method method) {
  switch (method) {
    case Method::kAnderson: return SNESANDERSON;
    case Method::kNgmres: return SNESNGMRES;
    case Method::kQuasiNewton: return SNESQN;
    case Method::kNewtonLineSearch: return SNESNEWTONLS;
    case Method::kNonlinearCg: return SNESNCG;
  }
  return SNESANDERSON;
}

std::string ReasonName(SNESConvergedReason reason) {
  if (reason >= SNES_DIVERGED_TR_DELTA && reason <= SNES_BREAKOUT_INNER_ITER) return SNESConvergedReasons[reason];
  return "SNES reason " + std::to_string(static_cast<int>(reason));
}

// Runs SNESSolve on one sample from u (n doubles), leaving its final point in u.
template <typename Scalar>
internal::LibraryVerdict SolveSample(const typename PetscSolver<Scalar>::Options& o, ErrorRecord& record,
                                     internal::SampleProblem<Scalar>& problem, double* u) {
  const PetscInt n = static_cast<PetscInt>(problem.dimension());
  record.message.clear();
  CallbackData<Scalar> data{&problem, n, nullptr, std::vector<double>(u, u + n), nullptr};

  // Declared first: the SNES (and its KSP, line search) point at it until destroyed.
  OwnedOptions options;
  Check(PetscOptionsCreate(&options.p), "PetscOptionsCreate", record);
  OwnedVec x, r;
  Check(VecCreateSeq(PETSC_COMM_SELF, n, &x.p), "VecCreateSeq", record);
  Check(VecDuplicate(x.p, &r.p), "VecDuplicate", record);
  {
    PetscScalar* xx = nullptr;
    Check(VecGetArray(x.p, &xx), "VecGetArray", record);
    for (PetscInt i = 0; i < n; ++i) xx[i] = u[i];
    Check(VecRestoreArray(x.p, &xx), "VecRestoreArray", record);
  }

  OwnedSnes snes;
  Check(SNESCreate(PETSC_COMM_SELF, &snes.p), "SNESCreate", record);
  data.snes = snes.p;
  Check(PetscObjectSetOptions(reinterpret_cast<PetscObject>(snes.p), options.p), "PetscObjectSetOptions", record);
  Check(SNESSetType(snes.p, SnesType(o.method)), "SNESSetType", record);
  Check(SNESSetFunction(snes.p, r.p, Residual<Scalar>, &data), "SNESSetFunction", record);

  const std::string memory = std::to_string(o.memory);
  OwnedMat jacobian;
  switch (o.method) {
    case Method::kAnderson: {
      char beta[32];
      std::snprintf(beta, sizeof(beta), "%.17g", o.damping);
      Check(PetscOptionsSetValue(options.p, "-snes_anderson_m", memory.c_str()), "PetscOptionsSetValue", record);
      Check(PetscOptionsSetValue(options.p, "-snes_anderson_beta", beta), "PetscOptionsSetValue", record);
      break;
    }
    case Method::kNgmres:
      Check(PetscOptionsSetValue(options.p, "-snes_ngmres_m", memory.c_str()), "PetscOptionsSetValue", record);
      break;
    case Method::kQuasiNewton:
      Check(PetscOptionsSetValue(options.p, "-snes_qn_m", memory.c_str()), "PetscOptionsSetValue", record);
      Check(SNESQNSetType(snes.p, QnType(o.qn_type)), "SNESQNSetType", record);
      break;
    case Method::kNonlinearCg:
      Check(SNESNCGSetType(snes.p, NcgType(o.ncg_type)), "SNESNCGSetType", record);
      break;
    case Method::kNewtonLineSearch: {
      if (o.jacobian_products && problem.HasJacobianProducts()) {
        Check(MatCreateShell(PETSC_COMM_SELF, n, n, n, n, &data, &jacobian.p), "MatCreateShell", record);
        Check(MatShellSetOperation(jacobian.p, MATOP_MULT, reinterpret_cast<void (*)(void)>(ShellMultiply<Scalar>)),
              "MatShellSetOperation", record);
        Check(SNESSetJacobian(snes.p, jacobian.p, jacobian.p, ShellJacobian<Scalar>, &data), "SNESSetJacobian", record);
      } else {
        // PETSc's finite-difference operator (MATMFFD, what MatCreateSNESMF
        // builds), made here so that it reads the private options only.
        Check(MatCreate(PETSC_COMM_SELF, &jacobian.p), "MatCreate", record);
        Check(PetscObjectSetOptions(reinterpret_cast<PetscObject>(jacobian.p), options.p), "PetscObjectSetOptions",
              record);
        Check(MatSetSizes(jacobian.p, n, n, n, n), "MatSetSizes", record);
        Check(MatSetType(jacobian.p, MATMFFD), "MatSetType", record);
        // MATMFFD reads -mat_mffd_* through an inner object, its shell
        // context (PETSc 3.18, src/mat/impls/mffd/mffd.c): that one too.
        void* inner = nullptr;
        PetscClassId inner_class = 0;
        if (MatShellGetContext(jacobian.p, &inner) == 0 && inner != nullptr &&
            PetscObjectGetClassId(static_cast<PetscObject>(inner), &inner_class) == 0 && inner_class == MATMFFD_CLASSID)
          Check(PetscObjectSetOptions(static_cast<PetscObject>(inner), options.p), "PetscObjectSetOptions", record);
        record.message.clear();
        Check(MatMFFDSetFunction(jacobian.p, DifferencedResidual<Scalar>, &data), "MatMFFDSetFunction", record);
        Check(MatSetUp(jacobian.p), "MatSetUp", record);
        Check(SNESSetJacobian(snes.p, jacobian.p, jacobian.p, DifferencedJacobian, nullptr), "SNESSetJacobian", record);
      }
      KSP ksp = nullptr;
      PC pc = nullptr;
      Check(SNESGetKSP(snes.p, &ksp), "SNESGetKSP", record);
      Check(KSPSetType(ksp, KSPGMRES), "KSPSetType", record);
      Check(KSPGMRESSetRestart(ksp, o.krylov_restart), "KSPGMRESSetRestart", record);
      Check(KSPGetPC(ksp, &pc), "KSPGetPC", record);
      Check(PCSetType(pc, PCNONE), "PCSetType", record);
      break;
    }
  }
  // The line search (of the types that use one) reads the options
  // database of its own object, not the SNES': give it the private one too.
  // (The KSP of newtonls inherits the SNES' options.)
  SNESLineSearch linesearch = nullptr;
  Check(SNESGetLineSearch(snes.p, &linesearch), "SNESGetLineSearch", record);
  Check(PetscObjectSetOptions(reinterpret_cast<PetscObject>(linesearch), options.p), "PetscObjectSetOptions", record);
  // SNESQN and SNESNCG choose their line search in SNESSetFromOptions only
  // when none exists yet; it exists now, so set what they choose (PETSc 3.18,
  // no nonlinear preconditioner): lbfgs cp, broyden basic, badbroyden l2; ncg cp.
  if (o.method == Method::kQuasiNewton) {
    const char* type = o.qn_type == "broyden" ? SNESLINESEARCHBASIC
                       : o.qn_type == "badbroyden" ? SNESLINESEARCHL2
                                                   : SNESLINESEARCHCP;
    Check(SNESLineSearchSetType(linesearch, type), "SNESLineSearchSetType", record);
  } else if (o.method == Method::kNonlinearCg) {
    Check(SNESLineSearchSetType(linesearch, SNESLINESEARCHCP), "SNESLineSearchSetType", record);
  } else if (o.method == Method::kNewtonLineSearch) {
    Check(SNESLineSearchSetType(linesearch, o.linesearch.c_str()), "SNESLineSearchSetType", record);
  }
  // |F(u)|_2 < absolute_tolerance; no relative or step test; libimplicit's
  // divergence rule (the driver's) instead of SNES' divergence tolerance.
  Check(SNESSetTolerances(snes.p, o.absolute_tolerance, 0.0, 0.0, o.max_iterations,
                          o.max_evaluations > 0 ? o.max_evaluations : -1),
        "SNESSetTolerances", record);
  Check(SNESSetDivergenceTolerance(snes.p, -1.0), "SNESSetDivergenceTolerance", record);
  Check(SNESSetFromOptions(snes.p), "SNESSetFromOptions", record);  // reads only the private options
  Check(SNESSetSolution(snes.p, x.p), "SNESSetSolution", record);  // SNESSetUp sizes its work vectors by x
  Check(SNESSetUp(snes.p), "SNESSetUp", record);

  internal::LibraryVerdict verdict;
  const PetscErrorCode solved = SNESSolve(snes.p, nullptr, x.p);
  if (data.exception) std::rethrow_exception(data.exception);
  SNESConvergedReason reason = SNES_CONVERGED_ITERATING;
  PetscInt iterations = 0;
  SNESGetConvergedReason(snes.p, &reason);
  SNESGetIterationNumber(snes.p, &iterations);
  verdict.iterations = static_cast<int>(iterations);
  if (solved != 0) {  // an error inside the solve: this sample's failure
    verdict.converged = false;
    verdict.failure = TerminationType::kFailure;
    verdict.reason = "SNESSolve error: " + record.Take();
  } else {
    verdict.converged = reason > 0;
    verdict.reason = ReasonName(reason);
    switch (reason) {
      case SNES_DIVERGED_MAX_IT:
      case SNES_DIVERGED_FUNCTION_COUNT: verdict.failure = TerminationType::kMaxIterations; break;
      case SNES_DIVERGED_FUNCTION_DOMAIN:
      case SNES_DIVERGED_FNORM_NAN: verdict.failure = TerminationType::kNonFinite; break;
      case SNES_DIVERGED_DTOL: verdict.failure = TerminationType::kDiverged; break;
      default: verdict.failure = TerminationType::kFailure; break;
    }
  }
  const PetscScalar* xx = nullptr;
  if (VecGetArrayRead(x.p, &xx) == 0) {
    for (PetscInt i = 0; i < n; ++i) u[i] = xx[i];
    VecRestoreArrayRead(x.p, &xx);
  } else {
    verdict.converged = false;
    verdict.failure = TerminationType::kFailure;
  }
  return verdict;
}

// ---- registration ------------------------------------------------------------

template <typename S>
internal::OptionFields<typename PetscSolver<S>::Options> Fields(Method method) {
  using O = typename PetscSolver<S>::Options;
  switch (method) {
    case Method::kAnderson:
      return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(damping)});
    case Method::kNgmres: return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory)});
    case Method::kQuasiNewton:
      return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(memory), IMPLICIT_OPTION_FIELD(qn_type)});
    case Method::kNewtonLineSearch:
      return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(linesearch), IMPLICIT_OPTION_FIELD(krylov_restart),
                                            IMPLICIT_OPTION_FIELD(jacobian_products)});
    case Method::kNonlinearCg: return internal::WithSharedFields<O>({IMPLICIT_OPTION_FIELD(ncg_type)});
  }
  return {};
}

}  // namespace

bool Available(std::string* why) {
  if (why != nullptr) why->clear();
  return true;
}

std::string Version() {
  int major = PETSC_VERSION_MAJOR, minor = PETSC_VERSION_MINOR, subminor = PETSC_VERSION_SUBMINOR, release = 1;
  PetscGetVersionNumber(&major, &minor, &subminor, &release);  // the library linked, not the headers
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(subminor);
}

void RegisterSolvers() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal::RegisterBackendSolvers<PetscSolver>(
        "PETSc " + Version(),
        {Method::kAnderson, Method::kNgmres, Method::kQuasiNewton, Method::kNewtonLineSearch, Method::kNonlinearCg},
        &Fields<float>, &Fields<double>);
  });
}

template <typename Scalar>
Summary PetscSolver<Scalar>::Solve(const FixedPointMap<Scalar>& map, MatrixRef<Scalar> z) const {
  std::lock_guard<std::recursive_mutex> lock(PetscMutex());
  EnsureInitialized();
  ErrorRecord record;
  ErrorHandlerScope handler(&record);
  return internal::SolvePerSample<Scalar>(
      name(), options_, map, z,
      [&](internal::SampleProblem<Scalar>& problem, double* u) { return SolveSample<Scalar>(options_, record, problem, u); });
}

template class PetscSolver<float>;
template class PetscSolver<double>;

}  // namespace petsc
}  // namespace implicit
