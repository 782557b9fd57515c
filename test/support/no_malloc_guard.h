// Include FIRST (before any Eigen header) in a test that checks that code does
// not allocate Eigen heap memory: EIGEN_RUNTIME_NO_MALLOC makes every Eigen
// heap allocation check Eigen::internal::is_malloc_allowed(), and eigen_assert
// is redefined to throw implicit_no_malloc_test::EigenAssertion (with NDEBUG
// undefined), so a forbidden allocation fails the test in Release builds too
// instead of passing silently. Forbid with
// Eigen::internal::set_is_malloc_allowed(false). IMPLICIT_NO_EXTERN_TEMPLATES
// makes the test compile the library's solver and layer code itself, with
// these checks, instead of linking the copies compiled once without them.
#pragma once
#undef NDEBUG
#define EIGEN_RUNTIME_NO_MALLOC
#define IMPLICIT_NO_EXTERN_TEMPLATES
#include <stdexcept>
#include <string>
namespace implicit_no_malloc_test {
struct EigenAssertion : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace implicit_no_malloc_test
#define eigen_assert(x)                                                                    \
  do {                                                                                     \
    if (!static_cast<bool>(x))                                                             \
      throw ::implicit_no_malloc_test::EigenAssertion("Eigen assertion failed: " #x);      \
  } while (false)
