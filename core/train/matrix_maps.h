#pragma once
// Eigen views over the trainer's flat row-major buffers, for train_ops.cpp and llama_ops.cpp.
// Eigen's AVX-512 paths make GCC 12 report its own intrinsics' undefined lanes as uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>

namespace kvscope::train_maps {

template <typename S> using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S> using MapM = Eigen::Map<Mat<S>>;
template <typename S> using CMapM = Eigen::Map<const Mat<S>>;
template <typename S> using Strided = Eigen::Map<Mat<S>, 0, Eigen::OuterStride<>>;
template <typename S> using CStrided = Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>>;

}  // namespace kvscope::train_maps
