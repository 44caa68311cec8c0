#pragma once
// Shape legend, used in comments wherever a tensor is made:
//   T = new tokens this step (rows computed), P = key positions attended, S = cache slots (capacity),
//   L = layers, H = heads, D = head dim, C = H*D = n_embd, F = n_inner, V = vocab.
// Order is PyTorch's, outer to inner; every buffer is row-major float32 unless it says otherwise.
//
// This header pulls in Eigen and is included only by core/*.cpp that do numeric work, never by headers
// other code includes (builds stay fast on two cores).
#include <Eigen/Core>

namespace kvscope {

using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<MatRM>;
using ConstMapMat = Eigen::Map<const MatRM>;
using VecF = Eigen::Matrix<float, Eigen::Dynamic, 1>;
using MapVec = Eigen::Map<VecF>;
using ConstMapVec = Eigen::Map<const VecF>;

}  // namespace kvscope
