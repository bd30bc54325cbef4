#include "shm/layout.h"

#include <cstdint>

namespace gift::shm {
namespace {

// Hands out 256-byte aligned byte ranges one after the other, so that every
// array (floats, doubles, int64s) starts on a boundary that suits both host
// vector loads and coalesced device access.
class Bump {
 public:
  uint64_t Take(uint64_t bytes) {
    uint64_t at = next_;
    next_ = Align(next_ + bytes);
    return at;
  }
  uint64_t Floats(int64_t n) { return Take(uint64_t(n) * sizeof(float)); }
  uint64_t total() const { return next_; }

 private:
  static uint64_t Align(uint64_t x) { return (x + 255) / 256 * 256; }
  uint64_t next_ = 0;
};

}  // namespace

LayerRegionLayout LayerRegionLayout::Compute(int64_t d_in, int32_t r_cap,
                                             int32_t k_cap) {
  LayerRegionLayout l{};
  Bump b;
  for (Slot& s : l.slot) {
    s.u = b.Floats(d_in * r_cap);
    s.c = b.Floats(r_cap);
    s.c_inv = b.Floats(r_cap);
    s.lambda = b.Floats(r_cap);
    s.omega = b.Floats(d_in * k_cap);
  }
  l.omega0 = b.Floats(d_in * k_cap);
  for (Sketch& s : l.sketch) {
    s.y = b.Floats(d_in * k_cap);
    s.trace = b.Take(sizeof(double));
    s.count = b.Take(sizeof(int64_t));
  }
  l.bytes = b.total();
  return l;
}

FullRegionLayout FullRegionLayout::Compute(int64_t d_in) {
  FullRegionLayout l{};
  Bump b;
  for (Acc& a : l.acc) {
    a.a = b.Floats(d_in * d_in);
    a.trace = b.Take(sizeof(double));
    a.count = b.Take(sizeof(int64_t));
  }
  for (Slot& s : l.slot) {
    s.t = b.Floats(d_in * d_in);
    s.t_inv = b.Floats(d_in * d_in);
  }
  l.bytes = b.total();
  return l;
}

}  // namespace gift::shm
