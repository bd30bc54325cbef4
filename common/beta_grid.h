// The β grid of the low-rank transform's auto mode (DESIGN §2): on probe
// steps, a factor the daemon marks beta_auto is also probed with its
// coefficients rebuilt for each of these damping strengths
// (client::LayerFactor::WithBeta), and the daemon builds the layer's next
// factor with the best measured one (daemon::ChooseBeta).
//
// Thread safety: constants.
#ifndef GIFT_COMMON_BETA_GRID_H_
#define GIFT_COMMON_BETA_GRID_H_

namespace gift {

inline constexpr int kBetaGrid = 3;
inline constexpr double kBetaGridValues[kBetaGrid] = {0.3, 1.0, 3.0};

}  // namespace gift

#endif  // GIFT_COMMON_BETA_GRID_H_
