// Matrix types shared by the fidelity library. Gradients are row-major so
// that the flattening quantized in blocks and chunks is the .npy (C) order.
//
// Thread safety: type aliases only.
#ifndef GIFT_TOOLS_FIDELITY_MATRIX_H_
#define GIFT_TOOLS_FIDELITY_MATRIX_H_

#include <Eigen/Dense>

namespace gift::fidelity {

using RowMatrixd =
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixf =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace gift::fidelity

#endif  // GIFT_TOOLS_FIDELITY_MATRIX_H_
