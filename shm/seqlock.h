// Seqlock over a SeqWord in shared memory (shm/layout.h): one writer
// process, any number of reader processes, nobody blocks.
//
//   // writer (the only one for this word)
//   SeqlockWriteBegin(&slot->lock);
//   slot->version = v; ...
//   SeqlockWriteEnd(&slot->lock);
//
//   // reader
//   FactorSlot copy;
//   bool ok = SeqlockRead(&slot->lock, [&] { copy = CopyOf(*slot); });
//   // ok == false: the writer was busy for every try; use the old copy.
//
// The data between begin and end is copied with plain loads inside the
// read callback; a torn copy is detected by the sequence check and thrown
// away. Thread safety: as above, one writer per word.
#ifndef GIFT_SHM_SEQLOCK_H_
#define GIFT_SHM_SEQLOCK_H_

#include <atomic>
#include <cstdint>

#include "shm/layout.h"

namespace gift::shm {

inline void SeqlockWriteBegin(SeqWord* seq) {
  seq->fetch_add(1, std::memory_order_relaxed);  // now odd
  std::atomic_thread_fence(std::memory_order_release);
}

inline void SeqlockWriteEnd(SeqWord* seq) {
  seq->fetch_add(1, std::memory_order_release);  // even again
}

// Calls read() until it ran while no write was in progress (true), at most
// `tries` times (false).
template <typename F>
bool SeqlockRead(const SeqWord* seq, F&& read, int tries = 64) {
  for (int i = 0; i < tries; ++i) {
    uint64_t before = seq->load(std::memory_order_acquire);
    if (before & 1) continue;
    read();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq->load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

}  // namespace gift::shm

#endif  // GIFT_SHM_SEQLOCK_H_
