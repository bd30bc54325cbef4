// One rank of the Gloo multi-process tests, launched by RunRanks
// (gloo_multiprocess_test.cc). Usage: gloo_rank_worker SCENARIO [TIMEOUT_MS]
//
//   collectives  runs every collective on deterministic per-rank data and
//                checks each result exactly against what every peer sent,
//                and the byte counters against what the process actually
//                wrote to its sockets (/proc/self/io). Exit 0 when all pass.
//   peer_exits   after a barrier the last rank exits at once (a crash);
//   peer_stalls  after a barrier the last rank sleeps past the timeout.
//                The survivors call AllReduce, check that a further call
//                fails fast as broken, report "code=C elapsed_ms=T" and exit
//                with 100 + C (the absl::StatusCode of the failed call).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/gloo_transport.h"
#include "client/transport_factory.h"
#include "tests/multiprocess/harness.h"
#include "tests/multiprocess/rank_checker.h"

namespace gift::client {
namespace {

constexpr int kExitCheckFailed = 1;
constexpr int kExitSetup = 2;
constexpr int kExitUnexpectedOk = 3;
constexpr int kExitStatusBase = 100;
constexpr uint8_t kSentinel = 0xEE;

using Checker = gift::testing::RankChecker;

uint8_t Pattern(int a, int b, size_t i) {
  return static_cast<uint8_t>(a * 131 + b * 17 + i * 7 + (i >> 8) * 3);
}

// Bytes that rank `from` sends rank `to` in the all-to-all: uneven, and zero
// for a quarter of the pairs.
size_t AllToAllSize(int from, int to) {
  if (from == to) return 97;
  return static_cast<size_t>((from + 2 * to) % 4) * 10007;
}

// Bytes this process has written through write/writev (all socket traffic
// of Gloo's TCP transport), from /proc/self/io.
uint64_t BytesWritten() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

// The byte counter must cover the payload the process really wrote, and
// transport headers may add only a little on top.
void CheckWire(Checker& check, const std::string& what, uint64_t counted,
               uint64_t written) {
  check.Expect(written >= counted && written <= counted + counted / 100 + 16384,
               absl::StrCat(what, ": counted ", counted,
                            " payload bytes but wrote ", written));
}

void CheckAllToAllV(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  std::vector<size_t> ss(w), so(w), rs(w), ro(w);
  size_t send_len = 0, recv_len = 0;
  for (int p = 0; p < w; ++p) {  // send pieces in rank order, 3-byte gaps
    ss[p] = AllToAllSize(me, p);
    so[p] = send_len;
    send_len += ss[p] + 3;
  }
  for (int p = w - 1; p >= 0; --p) {  // receive in reverse order, 5-byte gaps
    rs[p] = AllToAllSize(p, me);
    ro[p] = recv_len + 5;
    recv_len += rs[p] + 5;
  }
  std::vector<uint8_t> send(send_len, 0x11), recv(recv_len + 5, kSentinel);
  for (int p = 0; p < w; ++p) {
    for (size_t i = 0; i < ss[p]; ++i) send[so[p] + i] = Pattern(me, p, i);
  }
  const uint64_t before = c.bytes_sent().all_to_all;
  const uint64_t wire = BytesWritten();
  check.ExpectOk(c.AllToAllV(send.data(), ss, so, recv.data(), rs, ro),
                 "AllToAllV");
  const uint64_t written = BytesWritten() - wire;
  std::vector<bool> covered(recv.size(), false);
  for (int p = 0; p < w; ++p) {
    size_t bad = 0;
    for (size_t i = 0; i < rs[p]; ++i) {
      bad += recv[ro[p] + i] != Pattern(p, me, i);
      covered[ro[p] + i] = true;
    }
    check.Expect(bad == 0, absl::StrCat("AllToAllV: ", bad, " wrong bytes of ",
                                        rs[p], " from rank ", p));
  }
  size_t stray = 0;
  for (size_t i = 0; i < recv.size(); ++i) {
    stray += !covered[i] && recv[i] != kSentinel;
  }
  check.Expect(stray == 0, absl::StrCat("AllToAllV wrote ", stray,
                                        " bytes outside the receive ranges"));
  uint64_t expected = 0;
  for (int p = 0; p < w; ++p) expected += p == me ? 0 : ss[p];
  const uint64_t counted = c.bytes_sent().all_to_all - before;
  check.Expect(counted == expected, absl::StrCat("AllToAllV counted ", counted,
                                                 " expected ", expected));
  CheckWire(check, "AllToAllV", counted, written);
}

void CheckAllGatherV(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  std::vector<size_t> sizes(w);
  for (int p = 0; p < w; ++p) sizes[p] = p == 1 ? 0 : 200000 * p + 13;
  std::vector<uint8_t> send(sizes[me]);
  for (size_t i = 0; i < send.size(); ++i) send[i] = Pattern(me, 99, i);
  std::vector<uint8_t> recv(std::accumulate(sizes.begin(), sizes.end(), 0ul),
                            kSentinel);
  const uint64_t before = c.bytes_sent().all_gather;
  const uint64_t wire = BytesWritten();
  check.ExpectOk(c.AllGatherV(send.data(), send.size(), recv.data(), sizes),
                 "AllGatherV");
  const uint64_t written = BytesWritten() - wire;
  size_t offset = 0, bad = 0;
  for (int p = 0; p < w; ++p) {
    for (size_t i = 0; i < sizes[p]; ++i)
      bad += recv[offset + i] != Pattern(p, 99, i);
    offset += sizes[p];
  }
  check.Expect(bad == 0, absl::StrCat("AllGatherV: ", bad, " wrong bytes"));
  const uint64_t counted = c.bytes_sent().all_gather - before;
  check.Expect(counted == GlooTransport::RingAllGatherVBytes(sizes, me),
               absl::StrCat("AllGatherV counted ", counted));
  CheckWire(check, "AllGatherV", counted, written);
}

// Values are multiples of 0.5 small enough that every order of summation is
// exact, so each rank can check the sum bit for bit.
float FloatValue(int rank, size_t i) {
  return 0.5f * static_cast<float>((rank + 1) * (static_cast<int>(i % 13) - 6));
}

void CheckAllReduceFloat(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  constexpr size_t kCount = 1500001;  // several segments, not divisible by W
  std::vector<float> in(kCount), out(kCount, -1.0f);
  for (size_t i = 0; i < kCount; ++i) in[i] = FloatValue(me, i);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    const uint64_t before = c.bytes_sent().all_reduce;
    const uint64_t wire = BytesWritten();
    check.ExpectOk(
        c.AllReduce(in.data(), out.data(), kCount, DataType::kFloat32, op),
        absl::StrCat("AllReduce f32 ", ReduceOpName(op)));
    const uint64_t written = BytesWritten() - wire;
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float want = FloatValue(0, i);
      for (int p = 1; p < w; ++p) {
        const float v = FloatValue(p, i);
        want = op == ReduceOp::kSum   ? want + v
               : op == ReduceOp::kMin ? std::min(want, v)
                                      : std::max(want, v);
      }
      bad += out[i] != want;
    }
    check.Expect(bad == 0, absl::StrCat("AllReduce f32 ", ReduceOpName(op),
                                        ": ", bad, " wrong elements"));
    const uint64_t counted = c.bytes_sent().all_reduce - before;
    check.Expect(
        counted == GlooTransport::RingAllReduceBytes(kCount * 4, 4, w, me),
        absl::StrCat("AllReduce f32 counted ", counted));
    CheckWire(check, absl::StrCat("AllReduce f32 ", ReduceOpName(op)), counted,
              written);
  }
}

void CheckAllReduceInt64(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  constexpr size_t kCount = 1001;
  const auto value = [](int rank, size_t i) -> int64_t {
    return (i % 2 ? 1 : -1) * (rank + 1) * 1000000000000LL +
           static_cast<int64_t>(i) * (rank - 3);
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<int64_t> data(kCount);  // in place
    for (size_t i = 0; i < kCount; ++i) data[i] = value(me, i);
    check.ExpectOk(
        c.AllReduce(data.data(), data.data(), kCount, DataType::kInt64, op),
        absl::StrCat("AllReduce i64 ", ReduceOpName(op)));
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) {
      int64_t want = value(0, i);
      for (int p = 1; p < w; ++p) {
        want = op == ReduceOp::kSum   ? want + value(p, i)
               : op == ReduceOp::kMin ? std::min(want, value(p, i))
                                      : std::max(want, value(p, i));
      }
      bad += data[i] != want;
    }
    check.Expect(bad == 0, absl::StrCat("AllReduce i64 ", ReduceOpName(op),
                                        ": ", bad, " wrong elements"));
  }
}

void CheckAllReduceBf16(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  constexpr size_t kCount = 777;
  // Small integers: bfloat16 holds every partial sum exactly.
  const auto value = [](int rank, size_t i) {
    return static_cast<float>(static_cast<int>((rank + i) % 5) - 2);
  };
  const auto to_bf16 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  std::vector<uint16_t> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = to_bf16(value(me, i));
  const uint64_t before = c.bytes_sent().all_reduce;
  check.ExpectOk(c.AllReduce(data.data(), data.data(), kCount,
                             DataType::kBFloat16, ReduceOp::kSum),
                 "AllReduce bf16 sum");
  size_t bad = 0;
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0.0f;
    for (int p = 0; p < w; ++p) want += value(p, i);
    bad += data[i] != to_bf16(want);
  }
  check.Expect(bad == 0,
               absl::StrCat("AllReduce bf16 sum: ", bad, " wrong elements"));
  check.Expect(c.bytes_sent().all_reduce - before ==
                   GlooTransport::RingAllReduceBytes(kCount * 2, 2, w, me),
               "AllReduce bf16 byte count");
}

void CheckBroadcast(Transport& c, Checker& check) {
  const int w = c.world_size(), me = c.rank();
  constexpr size_t kBytes = 300007;
  for (int root : {0, w - 1}) {
    std::vector<uint8_t> data(kBytes, kSentinel);
    if (me == root) {
      for (size_t i = 0; i < kBytes; ++i) data[i] = Pattern(root, 55, i);
    }
    const uint64_t before = c.bytes_sent().broadcast;
    const uint64_t wire = BytesWritten();
    check.ExpectOk(c.Broadcast(data.data(), kBytes, root), "Broadcast");
    const uint64_t written = BytesWritten() - wire;
    size_t bad = 0;
    for (size_t i = 0; i < kBytes; ++i) bad += data[i] != Pattern(root, 55, i);
    check.Expect(bad == 0, absl::StrCat("Broadcast from ", root, ": ", bad,
                                        " wrong bytes"));
    const uint64_t counted = c.bytes_sent().broadcast - before;
    check.Expect(
        counted == GlooTransport::TreeBroadcastBytes(kBytes, w, me, root),
        absl::StrCat("Broadcast counted ", counted));
    CheckWire(check, absl::StrCat("Broadcast from ", root), counted, written);
  }
}

int RunCollectives(Transport& c) {
  Checker check(c.rank());
  CheckAllToAllV(c, check);
  CheckAllGatherV(c, check);
  CheckAllReduceFloat(c, check);
  CheckAllReduceInt64(c, check);
  CheckAllReduceBf16(c, check);
  CheckBroadcast(c, check);
  const uint64_t before = c.bytes_sent().Total();
  check.ExpectOk(c.Barrier(), "Barrier");
  check.Expect(c.bytes_sent().Total() == before, "Barrier sends no payload");
  return check.failures() == 0 ? 0 : kExitCheckFailed;
}

// The last rank crashes or stalls after a barrier; the others must fail
// within the timeout and then stay broken.
int RunPeerFailure(Transport& c, const multiprocess::RankEnv& env, bool stall,
                   absl::Duration timeout) {
  if (!c.Barrier().ok()) return kExitSetup;
  const int victim = c.world_size() - 1;
  if (c.rank() == victim) {
    if (!stall) {
      // Let the barrier finish everywhere, then vanish without destructors,
      // as abruptly as a crash, while the others wait in AllReduce.
      absl::SleepFor(absl::Milliseconds(200));
      ::_exit(0);
    }
    absl::SleepFor(timeout + absl::Milliseconds(1500));
    // The survivors gave up and disconnected: this rank must not hang either.
    const absl::Time start = absl::Now();
    const absl::Status s = c.Barrier();
    (void)multiprocess::WriteRankReport(
        env, absl::StrCat("code=", static_cast<int>(s.code()), " elapsed_ms=",
                          absl::ToInt64Milliseconds(absl::Now() - start)));
    return 0;
  }
  std::vector<float> data(100000, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status s = c.AllReduce(data.data(), data.data(), data.size(),
                                     DataType::kFloat32, ReduceOp::kSum);
  const absl::Duration elapsed = absl::Now() - start;
  std::cerr << "rank " << c.rank() << ": AllReduce after peer failure: " << s
            << " after " << elapsed << std::endl;
  (void)multiprocess::WriteRankReport(
      env, absl::StrCat("code=", static_cast<int>(s.code()),
                        " elapsed_ms=", absl::ToInt64Milliseconds(elapsed)));
  if (s.ok()) return kExitUnexpectedOk;
  const absl::Status again = c.Barrier();
  if (again.code() != absl::StatusCode::kFailedPrecondition) {
    std::cerr << "rank " << c.rank() << ": expected broken, got " << again
              << std::endl;
    return kExitCheckFailed;
  }
  return kExitStatusBase + static_cast<int>(s.code());
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: gloo_rank_worker collectives|peer_exits|peer_stalls "
                 "[TIMEOUT_MS]\n";
    return kExitSetup;
  }
  const std::string scenario = argv[1];
  int timeout_ms = 2000;
  if (argc > 2 && !absl::SimpleAtoi(argv[2], &timeout_ms)) return kExitSetup;
  absl::StatusOr<multiprocess::RankEnv> env =
      multiprocess::RankEnvFromEnvironment();
  if (!env.ok()) {
    std::cerr << env.status() << std::endl;
    return kExitSetup;
  }
  absl::StatusOr<std::unique_ptr<FileStore>> store =
      FileStore::Create(env->store_dir);
  if (!store.ok()) return kExitSetup;
  TransportOptions options;
  options.rank = env->rank;
  options.world_size = env->world_size;
  options.store = store->get();
  options.timeout = absl::Seconds(30);  // rendezvous on a loaded machine
  absl::StatusOr<std::unique_ptr<Transport>> comm = CreateTransport(options);
  if (!comm.ok()) {
    std::cerr << "rank " << env->rank << ": " << comm.status() << std::endl;
    return kExitSetup;
  }
  if (scenario == "collectives") return RunCollectives(**comm);
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  if (!(*comm)->SetTimeout(timeout).ok()) return kExitSetup;
  if (scenario == "peer_exits")
    return RunPeerFailure(**comm, *env, false, timeout);
  if (scenario == "peer_stalls")
    return RunPeerFailure(**comm, *env, true, timeout);
  std::cerr << "unknown scenario " << scenario << std::endl;
  return kExitSetup;
}

}  // namespace
}  // namespace gift::client

int main(int argc, char** argv) { return gift::client::Main(argc, argv); }
