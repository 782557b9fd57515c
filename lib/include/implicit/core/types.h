/// \file
/// Basic types shared by every part of libimplicit.
///
/// A *batch* holds B independent samples of an n-dimensional state as the
/// columns of an n x B matrix, so that maps and energies evaluate all samples
/// with matrix-matrix products. Everything is templated on the scalar type
/// (float or double).
///
/// \code
///   implicit::Matrix<double> z(n, batch);   // column b is sample b
///   implicit::Vector<double> e(batch);      // one energy value per sample
/// \endcode
#pragma once

// GCC 12 warns (-Wuninitialized, -Wmaybe-uninitialized) inside its own AVX-512
// intrinsics as Eigen uses them in -march builds (_mm512_undefined_pd, a
// known false positive). The warnings are placed at the intrinsics' lines, so
// silencing them while those headers are read (Eigen includes them first)
// keeps them out of every unit that includes libimplicit first, without
// turning the warnings off for any code of the project's or the user's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// ---- Compile once ----------------------------------------------------------
/// \def IMPLICIT_EXTERN_TEMPLATE_CLASS(Name)
/// Declares the float and double instantiations of class template Name `extern`
/// (nothing when IMPLICIT_NO_EXTERN_TEMPLATES is defined).
///
/// The library's templates are compiled for float and double once, in its .cc
/// files; each header declares those instantiations `extern` with these macros,
/// so code that includes it does not compile them again. Other scalar types
/// instantiate the templates as usual. Define IMPLICIT_NO_EXTERN_TEMPLATES
/// before including libimplicit to compile every instantiation in your own
/// translation unit (the no-allocation tests do, to build the library's loops
/// with their allocation checks).
#ifdef IMPLICIT_NO_EXTERN_TEMPLATES
#define IMPLICIT_EXTERN_TEMPLATE_CLASS(Name) static_assert(true, "")
#else
#define IMPLICIT_EXTERN_TEMPLATE_CLASS(Name) \
  extern template class Name<float>;         \
  extern template class Name<double>
#endif

/// Instantiates class template Name for float and double (in the library's .cc files).
#define IMPLICIT_INSTANTIATE_TEMPLATE_CLASS(Name) \
  template class Name<float>;                     \
  template class Name<double>

namespace implicit {

/// Index and size type of matrices and batches (Eigen::Index, signed).
using Index = Eigen::Index;

/// Dynamic-size matrix of Scalar; a batch of B samples of dimension n is n x B.
template <typename Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
/// Dynamic-size column vector of Scalar.
template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

///@{
/// Read-only and writable views of a batch (or of any matrix block).
template <typename Scalar>
using ConstMatrixRef = Eigen::Ref<const Matrix<Scalar>>;
template <typename Scalar>
using MatrixRef = Eigen::Ref<Matrix<Scalar>>;
template <typename Scalar>
using ConstVectorRef = Eigen::Ref<const Vector<Scalar>>;
template <typename Scalar>
using VectorRef = Eigen::Ref<Vector<Scalar>>;
///@}

namespace internal {

/// Makes a parameter a non-deduced context, so that Scalar is deduced from the
/// map alone and Eigen matrices convert to the Ref parameters.
template <typename T>
struct NonDeduced {
  using type = T;
};

/// Throws std::invalid_argument("<what>: expected RxC, got rxc") when a matrix
/// argument does not have the expected shape.
template <typename Derived>
void CheckShape(const char* what, const Eigen::EigenBase<Derived>& m,
                Index rows, Index cols) {
  if (m.rows() != rows || m.cols() != cols) {
    std::ostringstream s;
    s << what << ": expected " << rows << "x" << cols << ", got " << m.rows()
      << "x" << m.cols();
    throw std::invalid_argument(s.str());
  }
}

/// Throws std::invalid_argument for a batch with no samples or wrong dimension.
template <typename Derived>
void CheckBatch(const char* what, const Eigen::EigenBase<Derived>& m,
                Index dimension) {
  if (m.cols() == 0) {
    throw std::invalid_argument(std::string(what) +
                                ": empty batch (0 samples)");
  }
  if (m.rows() != dimension) {
    std::ostringstream s;
    s << what << ": state dimension " << m.rows()
      << " does not match the problem dimension " << dimension << " ("
      << m.rows() << "x" << m.cols() << " batch)";
    throw std::invalid_argument(s.str());
  }
}

/// Throws std::invalid_argument unless `columns` holds one batch index per
/// column of a compacted block (count), ascending, each below `batch` (the
/// batch the per-sample data were set for): FixedPointMap::EvaluateColumns.
inline void CheckColumns(const char* what, const std::vector<Index>& columns, Index count,
                         Index batch) {
  if (static_cast<Index>(columns.size()) != count) {
    std::ostringstream s;
    s << what << ": " << columns.size() << " column indices for a block of " << count << " columns";
    throw std::invalid_argument(s.str());
  }
  for (std::size_t j = 0; j < columns.size(); ++j) {
    const bool ascending = j == 0 || columns[j] > columns[j - 1];
    if (columns[j] < 0 || columns[j] >= batch || !ascending) {
      std::ostringstream s;
      s << what << ": column index " << columns[j] << " at position " << j
        << " is not ascending in [0, " << batch << ") (the batch the per-sample data were set for)";
      throw std::invalid_argument(s.str());
    }
  }
}

/// The default column evaluations (FixedPointMap::EvaluateColumns,
/// Energy::GradientColumns) of an object without per-sample data: throws
/// std::logic_error(no_columns_message) when it has per-sample data
/// (supports_subsets false), else checks the column indices of a block of
/// `count` columns (CheckColumns; any batch size).
inline void CheckSubsetColumns(bool supports_subsets, const char* no_columns_message, const char* what,
                               const std::vector<Index>& columns, Index count) {
  if (!supports_subsets) throw std::logic_error(no_columns_message);
  CheckColumns(what, columns, count, std::numeric_limits<Index>::max());
}

/// Optional per-column outputs (the energies' column evaluations): `values`
/// is either empty (not asked for) or has one entry per column of the block.
template <typename Derived>
void CheckOptionalValues(const char* what, const Eigen::EigenBase<Derived>& values, Index count) {
  if (values.size() != 0) CheckShape(what, values, count, 1);
}

/// out.col(j) = data.col(columns[j]): a per-sample matrix gathered for a block.
template <typename Scalar>
void GatherColumns(const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>& data,
                   const std::vector<Index>& columns,
                   Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>* out) {
  out->resize(data.rows(), static_cast<Index>(columns.size()));
  for (std::size_t j = 0; j < columns.size(); ++j) out->col(static_cast<Index>(j)) = data.col(columns[j]);
}

}  // namespace internal
}  // namespace implicit
