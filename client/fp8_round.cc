#include "client/fp8_round.h"

#include "common/status_macros.h"
#include "kernels/accumulate.h"

namespace gift::client {
namespace {

kernels::QuantizeSpec SpecOf(const BucketLayer& l) {
  return {l.format.fp8(), l.block_size};
}

// Payload bytes of a chunk that belong to GIFT layers.
uint64_t GiftBytes(const ChunkLayout& c, const std::vector<LayerIo>& io) {
  uint64_t b = 0;
  for (const Segment& s : c.segments) {
    if (io[s.layer].gift) b += s.payload_bytes();
  }
  return b;
}

}  // namespace

void RoundOutcome::Reset(size_t layers) {
  stats.assign(layers, kernels::QuantizeStats());
  nonfinite.assign(layers, false);
  bytes_euclid = bytes_gift = 0;
}

Fp8Round::Fp8Round(Transport* comm, BackendMemory* memory, Fp8Codec* codec,
                   VectorMath* math, GiftTransforms* transforms,
                   float owner_release_cap)
    : comm_(comm),
      memory_(memory),
      codec_(codec),
      math_(math),
      transforms_(transforms),
      send_(memory->NewBuffer()),
      recv_(memory->NewBuffer()),
      gather_send_(memory->NewBuffer()),
      gather_recv_(memory->NewBuffer()),
      acc_(memory->NewBuffer()),
      carry_(memory->NewBuffer()),
      keep_(memory->NewBuffer()),
      owner_release_cap_(owner_release_cap) {}

absl::Status Fp8Round::Pack(const EpochPlan& plan, const PieceLayout& piece,
                            const std::vector<LayerIo>& io) {
  const int w = comm_->world_size();
  offsets_.assign(w + 1, 0);
  for (int j = 0; j < w; ++j) {
    offsets_[j + 1] = offsets_[j] + piece.chunks[j].wire_bytes();
  }
  RETURN_IF_ERROR(send_->Resize(offsets_[w]));
  RETURN_IF_ERROR(send_->Zero());  // the padding before the scales
  int slot = 0;  // one statistics slot per segment, in chunk order
  for (int j = 0; j < w; ++j) {
    const ChunkLayout& c = piece.chunks[j];
    uint8_t* chunk = send_->u8() + offsets_[j];
    for (const Segment& s : c.segments) {
      const BucketLayer& l = plan.layers()[s.layer];
      const LayerIo& x = io[s.layer];
      float* res = x.worker_residual == nullptr
                       ? nullptr
                       : x.worker_residual + s.layer_begin;
      RETURN_IF_ERROR(QuantizeSegment(l, x.src + s.layer_begin, s.count,
                                      WireOf(chunk, c, s), res, slot++));
    }
  }
  return absl::OkStatus();
}

absl::Status Fp8Round::Reduce(const EpochPlan& plan, const ChunkLayout& mine,
                              const std::vector<LayerIo>& io,
                              float* owner_residual) {
  const size_t bytes = mine.wire_bytes();
  RETURN_IF_ERROR(acc_->Resize(mine.packed.size() * sizeof(float)));
  const bool capped = owner_release_cap_ > 0 && owner_residual != nullptr;
  if (capped) {
    RETURN_IF_ERROR(keep_->Resize(mine.packed.size() * sizeof(float)));
  }
  RETURN_IF_ERROR(gather_send_->Resize(bytes));
  RETURN_IF_ERROR(gather_send_->Zero());
  for (const Segment& s : mine.segments) {
    const BucketLayer& l = plan.layers()[s.layer];
    float* acc = acc_->floats() + s.elem_offset;
    RETURN_IF_ERROR(AccumulateSegment(l, mine, s, acc));
    float *res = nullptr, *keep = nullptr;
    if (io[s.layer].owner_feedback && owner_residual != nullptr) {
      res = owner_residual + s.elem_offset;
      if (io[s.layer].reset_owner_residual) {
        RETURN_IF_ERROR(ResetOwnerResidual(l, s, io[s.layer], res));
      }
      if (capped) {
        // What the cap holds back stays in the residual (below).
        keep = keep_->floats() + s.elem_offset;
        RETURN_IF_ERROR(
            math_->AddCapped(acc, res, s.count, owner_release_cap_, keep));
      } else {
        RETURN_IF_ERROR(math_->AddInPlace(acc, res, s.count));
      }
    }
    RETURN_IF_ERROR(QuantizeSegment(
        l, acc, s.count, WireOf(gather_send_->u8(), mine, s), res, -1));
    if (keep != nullptr) RETURN_IF_ERROR(math_->AddInPlace(res, keep, s.count));
  }
  return absl::OkStatus();
}

// The owner residual holds whole and partial rows of the layer (row-major
// d_out × d_in; T acts along d_in, row by row). At a factor version switch
// (or a change between the GIFT and the Euclidean path) the whole rows are
// reprojected (whitened, un-whitened), so the owner's error of the last step
// is carried into the new coordinates instead of dropped; the partial rows
// at the segment's two ends cannot be (the rest of the row lives in another
// rank's chunk) and are zeroed, as is all of it on first use. Every owner
// does the same for its own chunk; the result is still broadcast from the
// owner, so every rank applies the same bits.
absl::Status Fp8Round::ResetOwnerResidual(const BucketLayer& l,
                                          const Segment& s, const LayerIo& x,
                                          float* res) {
  const int64_t d = l.d_in(), begin = s.layer_begin, end = begin + s.count;
  const int64_t first = (begin + d - 1) / d * d, last = end / d * d;
  const bool from = x.owner_carry == OwnerCarry::kReproject ||
                    x.owner_carry == OwnerCarry::kUnwhiten;
  const bool to = x.owner_carry == OwnerCarry::kReproject ||
                  x.owner_carry == OwnerCarry::kWhiten;
  if (x.owner_carry == OwnerCarry::kZero || first >= last) {
    return memory_->Zero(res, s.count * sizeof(float));
  }
  if ((from && x.owner_from == nullptr) || (to && x.owner_to == nullptr)) {
    return absl::InternalError("owner residual carry without its factor");
  }
  RETURN_IF_ERROR(memory_->Zero(res, (first - begin) * sizeof(float)));
  RETURN_IF_ERROR(
      memory_->Zero(res + (last - begin), (end - last) * sizeof(float)));
  float* rows = res + (first - begin);
  const int64_t n = last - first;
  if (x.owner_carry == OwnerCarry::kReproject) {
    return transforms_->Reproject(*x.owner_from, *x.owner_to, rows, n / d);
  }
  // R T or R T⁻¹ (neither may write over its input).
  RETURN_IF_ERROR(carry_->Resize(n * sizeof(float)));
  if (to) {
    RETURN_IF_ERROR(transforms_->Forward(*x.owner_to, rows, n / d, nullptr,
                                         carry_->floats()));
  } else {
    RETURN_IF_ERROR(
        transforms_->Inverse(*x.owner_from, rows, n / d, carry_->floats()));
  }
  RETURN_IF_ERROR(memory_->Zero(rows, n * sizeof(float)));
  return math_->AddInPlace(rows, carry_->floats(), n);
}

absl::Status Fp8Round::QuantizeSegment(const BucketLayer& l, const float* x,
                                       int64_t n, const SegmentWire& wire,
                                       float* residual, int stat_slot) {
  if (!l.format.is_fp4()) {
    return codec_->Quantize(x, n, SpecOf(l), wire.codes, wire.scales, residual,
                            stat_slot);
  }
  return codec_->QuantizeFp4(x, n, l.format.fp4(), wire.codes,
                             wire.block_scales, wire.scales, residual,
                             stat_slot);
}

// The W received copies of segment s of this rank's chunk, summed in rank
// order into acc.
absl::Status Fp8Round::AccumulateSegment(const BucketLayer& l,
                                         const ChunkLayout& mine,
                                         const Segment& s, float* acc) {
  const int w = comm_->world_size();
  const size_t bytes = mine.wire_bytes();
  if (!l.format.is_fp4()) {
    std::vector<kernels::Fp8Source> sources(w);
    for (int p = 0; p < w; ++p) {
      const SegmentWire x = WireOf(recv_->u8() + p * bytes, mine, s);
      sources[p] = {x.codes, x.scales};
    }
    return codec_->Accumulate(sources.data(), w, s.count, SpecOf(l), acc);
  }
  std::vector<kernels::Fp4Source> sources(w);
  for (int p = 0; p < w; ++p) {
    const SegmentWire x = WireOf(recv_->u8() + p * bytes, mine, s);
    sources[p] = {x.codes, x.block_scales, x.scales};
  }
  return codec_->AccumulateFp4(sources.data(), w, s.count, l.format.fp4(), acc);
}

absl::Status Fp8Round::Unpack(const EpochPlan& plan, const PieceLayout& piece,
                              const std::vector<LayerIo>& io) {
  const float w = static_cast<float>(comm_->world_size());
  for (size_t j = 0; j < piece.chunks.size(); ++j) {
    const ChunkLayout& c = piece.chunks[j];
    uint8_t* chunk = gather_recv_->u8() + offsets_[j];
    for (const Segment& s : c.segments) {
      const BucketLayer& l = plan.layers()[s.layer];
      const SegmentWire x = WireOf(chunk, c, s);
      float* out = io[s.layer].dst + s.layer_begin;
      if (!l.format.is_fp4()) {
        RETURN_IF_ERROR(codec_->FlagNonFinite(x.scales, s.num_scales, s.layer));
        RETURN_IF_ERROR(
            codec_->Dequantize(x.codes, x.scales, s.count, SpecOf(l), out));
      } else {
        const kernels::Fp4Format f = l.format.fp4();
        RETURN_IF_ERROR(codec_->FlagNonFiniteFp4(
            x.block_scales, s.num_block_scales, x.scales, f, s.layer));
        RETURN_IF_ERROR(codec_->DequantizeFp4(x.codes, x.block_scales, x.scales,
                                              s.count, f, out));
      }
      RETURN_IF_ERROR(math_->Divide(out, s.count, w));
    }
  }
  return absl::OkStatus();
}

// Merges the round's statistics (segment order, as Pack numbered them) and
// non-finite flags into the outcome.
absl::Status Fp8Round::Collect(const PieceLayout& piece,
                               RoundOutcome* outcome) {
  std::vector<kernels::QuantizeStats> stats;
  std::vector<uint8_t> flags;
  RETURN_IF_ERROR(codec_->EndRound(&stats, &flags));
  size_t slot = 0;
  for (const ChunkLayout& c : piece.chunks) {
    for (const Segment& s : c.segments) {
      outcome->stats[s.layer].Merge(stats[slot++]);
    }
  }
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0) outcome->nonfinite[i] = true;
  }
  return absl::OkStatus();
}

void Fp8Round::CountBytes(const EpochPlan& plan, const PieceLayout& piece,
                          const std::vector<LayerIo>& io, uint64_t a2a_bytes,
                          uint64_t gather_bytes, RoundOutcome* outcome) const {
  (void)plan;
  const int me = comm_->rank();
  // Phase 1: what went to each peer; phase 2: the share of the whole piece.
  uint64_t a2a_total = 0, a2a_gift = 0, all_total = 0, all_gift = 0;
  for (size_t j = 0; j < piece.chunks.size(); ++j) {
    const uint64_t wire = piece.chunks[j].wire_bytes();
    const uint64_t gift = GiftBytes(piece.chunks[j], io);
    all_total += wire;
    all_gift += gift;
    if (static_cast<int>(j) == me) continue;
    a2a_total += wire;
    a2a_gift += gift;
  }
  auto share = [](uint64_t bytes, uint64_t part, uint64_t whole) -> uint64_t {
    if (whole == 0) return 0;
    return static_cast<uint64_t>(static_cast<long double>(bytes) * part /
                                 whole);
  };
  const uint64_t gift = share(a2a_bytes, a2a_gift, a2a_total) +
                        share(gather_bytes, all_gift, all_total);
  outcome->bytes_gift += gift;
  outcome->bytes_euclid += a2a_bytes + gather_bytes - gift;
}

absl::Status Fp8Round::Run(const EpochPlan& plan, const PieceLayout& piece,
                           const std::vector<LayerIo>& io,
                           float* owner_residual, RoundOutcome* outcome) {
  const int w = comm_->world_size(), me = comm_->rank();
  int segments = 0;
  for (const ChunkLayout& c : piece.chunks) segments += c.segments.size();
  RETURN_IF_ERROR(codec_->BeginRound(segments, plan.layers().size()));
  RETURN_IF_ERROR(Pack(plan, piece, io));
  const ChunkLayout& mine = piece.chunks[me];
  const size_t bytes = mine.wire_bytes();
  std::vector<size_t> send_sizes(w), send_offsets(w), recv_sizes(w, bytes),
      recv_offsets(w), gather_sizes(w);
  for (int p = 0; p < w; ++p) {
    send_sizes[p] = offsets_[p + 1] - offsets_[p];
    send_offsets[p] = offsets_[p];
    recv_offsets[p] = p * bytes;
    gather_sizes[p] = send_sizes[p];
  }
  RETURN_IF_ERROR(recv_->Resize(w * bytes));
  const BytesSent before = comm_->bytes_sent();
  RETURN_IF_ERROR(comm_->AllToAllV(send_->data(), send_sizes, send_offsets,
                                   recv_->data(), recv_sizes, recv_offsets));
  RETURN_IF_ERROR(Reduce(plan, mine, io, owner_residual));
  RETURN_IF_ERROR(gather_recv_->Resize(offsets_[w]));
  RETURN_IF_ERROR(comm_->AllGatherV(gather_send_->data(), bytes,
                                    gather_recv_->data(), gather_sizes));
  const BytesSent after = comm_->bytes_sent();
  CountBytes(plan, piece, io, after.all_to_all - before.all_to_all,
             after.all_gather - before.all_gather, outcome);
  RETURN_IF_ERROR(Unpack(plan, piece, io));
  return Collect(piece, outcome);
}

}  // namespace gift::client
