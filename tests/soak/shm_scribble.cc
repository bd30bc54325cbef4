// shm_scribble: plays a rank that writes garbage into its shared memory,
// for the fault soak (tests/soak/soak.py). Maps a rank's control block
// (/dev/shm/<name>) and, for `seconds`, overwrites every field the rank
// itself writes — each layer entry's telemetry (with its seqlock word),
// sketch-window metadata and window counter — with random bytes, the
// all-ones, INT64_MAX and INT64_MIN patterns and NaN, in turn. The
// daemon-written parts (plan, factor slots, region descriptors) are left
// alone: they are the daemon's, and the rank reads them.
//
//   shm_scribble /giftsoak-1234-abcd-s3-ctl 5 [seed]
//
// Exit: 0 after `seconds`; 2 on bad arguments or when the block cannot be
// mapped (it names the reason).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "shm/layout.h"

namespace {

// Fills `bytes` at `p` with pattern `k` (0: random, 1: 0xFF, 2: INT64_MAX,
// 3: INT64_MIN, 4: NaN).
void Fill(void* p, size_t bytes, int k, std::mt19937_64& rng) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v = 0;
    switch (k) {
      case 0:
        v = rng();
        break;
      case 1:
        v = ~uint64_t{0};
        break;
      case 2:
        v = uint64_t{std::numeric_limits<int64_t>::max()};
        break;
      case 3:
        v = uint64_t{1} << 63;
        break;
      default: {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        std::memcpy(&v, &nan, sizeof(v));
      }
    }
    std::memcpy(b + i, &v, sizeof(v));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: shm_scribble SHM_NAME SECONDS [SEED]\n");
    return 2;
  }
  const char* name = argv[1];
  const double seconds = std::atof(argv[2]);
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  const int fd = shm_open(name, O_RDWR, 0);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 ||
      st.st_size < static_cast<off_t>(sizeof(gift::shm::ControlHeader))) {
    std::fprintf(stderr, "shm_scribble: cannot open %s\n", name);
    return 2;
  }
  void* block =
      mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (block == MAP_FAILED) {
    std::fprintf(stderr, "shm_scribble: cannot map %s\n", name);
    return 2;
  }
  // The number of layers from the size of the block (the daemon made it),
  // not from the header a rank could have scribbled over.
  uint32_t layers = 0;
  while (gift::shm::ControlBlockBytes(layers + 1) <=
         static_cast<uint64_t>(st.st_size)) {
    ++layers;
  }
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t writes = 0;
  for (int k = 0; std::chrono::steady_clock::now() < end; k = (k + 1) % 5) {
    for (uint32_t i = 0; i < layers; ++i) {
      gift::shm::LayerEntry* e = gift::shm::Entry(block, i);
      Fill(&e->tele_lock, sizeof(e->tele_lock), k, rng);
      Fill(&e->tele, sizeof(e->tele), k, rng);
      Fill(&e->sketch_meta, sizeof(e->sketch_meta), k, rng);
      Fill(&e->window_closed, sizeof(e->window_closed), k, rng);
      ++writes;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  munmap(block, st.st_size);
  std::printf("shm_scribble: %lld layer writes into %s (%u layers)\n",
              static_cast<long long>(writes), name, layers);
  return 0;
}
