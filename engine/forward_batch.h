// ForwardBatch: everything one forward step needs to know about its sequences, planned once on
// the host and written to the device with one copy of a packed staging buffer (in place, with
// no copy, where the host writes the backend's memory directly: the host backends).
//
// Token order inside a step: first every decode (a sequence computing exactly one new token),
// one token each, then the prefill chunks, sequence after sequence. Decodes attend over the
// paged latent cache (absorbed MLA); prefill chunks attend over their own decompressed keys and,
// when the sequence already has cached context, over that context in rounds of at most
// `context_chunk_tokens` gathered tokens, merged by log-sum-exp.
#ifndef MLASERVE_ENGINE_FORWARD_BATCH_H_
#define MLASERVE_ENGINE_FORWARD_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/mla_split_plan.h"
#include "kernels/sampling_math.h"

namespace mlaserve {

// One byte of each 64-byte cache line of [data, data + bytes), summed: loads that nothing waits
// on, so that their misses overlap (KeepLoads keeps them). Loads rather than prefetches: lines
// that weights streamed out lie on pages whose translations went with them, where prefetches
// saved less (docs/performance.md, "Decode graphs: eager vs replay"), as fits their being
// dropped on a TLB miss.
inline uint32_t SumLines(const void* data, size_t bytes) {
  constexpr size_t kLineBytes = 64;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t sum = 0;
  for (size_t j = 0; j < bytes; j += kLineBytes) sum += p[j];
  if (bytes > 0) sum += p[bytes - 1];  // a span that ends on a line of its own
  return sum;
}

// Keeps loads whose values are used nowhere else, for their effect on the caches alone.
inline void KeepLoads(uint32_t sum) { asm volatile("" : : "r"(sum)); }

// One sequence's part of a step, as the scheduler decided it.
struct StepSequence {
  absl::Span<const int32_t> token_ids;    // [>= start_position + num_new_tokens] all tokens so far
  int32_t start_position = 0;             // tokens whose KV is already cached
  int32_t num_new_tokens = 0;             // computes token_ids[start, start + num_new_tokens)
  absl::Span<const int32_t> block_table;  // covers start_position + num_new_tokens tokens
  bool needs_logits = false;              // return logits of the last new token
  // With needs_logits: whether the token depends on the row's logits alone (no penalties), so
  // that the device may draw it (Backend::SampleTokens with `sampling`) and report `top_logprobs`
  // alternatives (StepLogits::drawn_on_device).
  bool device_samplable = false;
  sampling::RowOptions sampling{};
  int32_t top_logprobs = 0;  // <= kMaxTopLogprobs
};

// Static limits the metadata buffers are sized for.
struct ForwardLimits {
  int64_t max_num_tokens = 0;        // tokens per step
  int64_t max_num_seqs = 0;          // sequences per step
  int64_t max_blocks_per_seq = 0;    // ceil(max_model_len / block_size)
  int64_t block_size = 64;
  int64_t context_chunk_tokens = 0;  // gathered context tokens per round
  int64_t max_context_rounds = 0;    // ceil(max_num_seqs * max_model_len / context_chunk_tokens)
  // Workers of the decodes' split-KV plan (Backend::mla_decode_split_workers); 0: no plan.
  int64_t mla_split_workers = 0;
  // How the plan balances (MlaSplitRuleFor the backend's batch invariance).
  MlaSplitRule mla_split_rule = MlaSplitRule::kBalanced;
};

// Views of one context round (prefill over cached context).
struct ContextRound {
  int32_t num_tokens = 0;   // gathered tokens in this round (<= context_chunk_tokens)
  TensorView cu_gather;     // [num_prefill_seqs + 1] i32 exclusive scan of gathered tokens
  TensorView gather_start;  // [num_prefill_seqs] i32 first context position gathered per seq
};

struct ForwardBatch {
  int32_t num_tokens = 0;
  int32_t num_decodes = 0;        // tokens [0, num_decodes) are decodes, one per sequence
  int32_t num_prefill_seqs = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_logits = 0;
  int32_t num_decode_logits = 0;  // logits rows [0, num_decode_logits) belong to decodes
  int32_t num_blocks_per_seq = 0;  // block-table width used this step
  bool prefill_has_context = false;
  // logit_items[r] = index into the caller's StepSequence list of logits row r.
  std::vector<int32_t> logit_items;

  TensorView input_ids;              // [num_tokens] i32
  TensorView positions;              // [num_tokens] i32
  TensorView slot_mapping;           // [num_tokens] i32
  TensorView decode_block_tables;    // [num_decodes, num_blocks_per_seq] i32
  TensorView decode_seq_lens;        // [num_decodes] i32 (including the new token)
  // The decodes' split-KV plan (kernels/mla_split_plan.h), empty without mla_split_workers:
  TensorView decode_split_offsets;   // [num_decodes + 1] i32
  TensorView decode_split_items;     // [MlaSplitCapacity(num_decodes, workers, rule), 3] i32
  TensorView prefill_cu_seqlens;     // [num_prefill_seqs + 1] i32 over prefill tokens
  TensorView prefill_block_tables;   // [num_prefill_seqs, num_blocks_per_seq] i32
  TensorView logits_indices;         // [num_logits] i32 rows of the step's tokens
  std::vector<ContextRound> context_rounds;
  // Elements of the metadata buffer, from its start, that the step's views cover (the copy).
  int64_t metadata_words = 0;
};

// A decode-graph bucket's metadata: its rows (decodes and padding) and block-table width, and
// where each view Build plans for it begins, in elements of the builder's buffer.
struct alignas(64) DecodeLayout {
  int32_t rows = 0;
  int32_t width = 0;
  int32_t input_ids = 0, positions = 0, slot_mapping = 0, block_tables = 0, seq_lens = 0;
  int32_t prefill_cu_seqlens = 0, logits_indices = 0;
  int32_t split_offsets = -1;  // -1: no split-KV plan
  int32_t split_items = 0, split_item_count = 0;
  int32_t words = 0;  // ForwardBatch::metadata_words
};

// Plans steps and owns the device metadata buffer they are written into. Owned by the engine
// thread. The buffer is allocated once, uninitialized; after a step's single copy (or its writes
// in place, Backend::HostAddress) every element its views cover holds that step's value. A
// replayed step leaves alone the block-table entries it knows to hold it already (zeros past a
// row's own blocks that the last step into the same bucket wrote).
class ForwardBatchBuilder {
 public:
  static absl::StatusOr<ForwardBatchBuilder> Create(const ForwardLimits& limits, Backend* backend);

  // Plans `seqs` (any order; decodes are recognised by num_new_tokens == 1) and writes the
  // metadata to the device with one copy. REQUIRES: the sequences fit the limits.
  // With pad_decodes_to > 0 (a decode-graph bucket; REQUIRES: only decodes, at most that
  // many), the batch is padded to exactly that many decode rows, every row gets logits (rows
  // past seqs.size() are padding), and the views depend on the bucket alone.
  void Build(absl::Span<const StepSequence> seqs, ForwardBatch* batch, int32_t pad_decodes_to = 0);

  // Where a decode-graph bucket's steps write their metadata: `padded`, a batch Build planned
  // with pad_decodes_to = its bucket on this builder, in a few words (one cache line, read by
  // every replayed step).
  DecodeLayout DecodeLayoutOf(const ForwardBatch& padded) const;
  // A decode-graph bucket's step without planning it again: writes what
  // Build(seqs, &b, bucket) writes into the views `layout` describes. Decode row r (and logits
  // row r) is seqs[r], as in b.logit_items; rows past seqs.size() are padding. Reads and writes
  // far less memory than Build, which matters between two replays: the step before has
  // streamed the weights through every cache. Of each block-table row it writes the sequence's
  // own entries and zeroes only those the row held past them before: the rows are
  // ceil(max_model_len / block_size) entries wide. REQUIRES: only decodes, at most the
  // bucket's rows of them, each within the limits.
  void BuildDecodes(absl::Span<const StepSequence> seqs, const DecodeLayout& layout);
  // One byte of each line BuildDecodes(seqs, layout) reads or writes (the sequences' array,
  // each one's newest token and block table, the buffer's lines it writes, its row state) and
  // of this object, summed (KeepLoads): what the next step into the same layout most likely
  // reads again, read during the previous replay's last op (Graph::Replay).
  uint32_t SumDecodeLines(absl::Span<const StepSequence> seqs, const DecodeLayout& layout) const;

  const ForwardLimits& limits() const { return limits_; }
  // Bytes of the device metadata buffer.
  uint64_t buffer_bytes() const { return buffer_.bytes(); }

 private:
  ForwardBatchBuilder(const ForwardLimits& limits, Backend* backend, DeviceBuffer buffer,
                      int64_t capacity);

  // Reserves n elements of the staging buffer; returns the device view over them.
  TensorView Reserve(int64_t n, std::initializer_list<int64_t> shape, int32_t** host);
  // The elements written for the buffer's elements [offset, ...): the buffer itself where the
  // host writes it in place, else the staging buffer.
  int32_t* Staged(int64_t offset) {
    return (host_buffer_ != nullptr ? host_buffer_ : staging_.data()) + offset;
  }
  // The offset of a view into the buffer.
  int32_t OffsetOf(const TensorView& view) const;
  // Writes the decodes' split-KV plan over seq_lens[0, nd) into items slots of plan, nd + 1
  // offsets first, when the limits ask for one.
  void WriteSplitPlan(const int32_t* seq_lens, int32_t nd, int32_t* offsets, int32_t* plan,
                      int64_t items);
  // Copies the staging elements [0, words) to the device buffer (nothing to do in place).
  void CopyStaged(int64_t words);

  ForwardLimits limits_;
  Backend* backend_;
  DeviceBuffer buffer_;  // [capacity] i32
  int64_t capacity_;
  // The buffer where the host writes it in place (Backend::HostAddress), else nullptr and the
  // metadata is written to staging_ and copied.
  int32_t* host_buffer_;
  std::vector<int32_t> staging_;
  std::vector<int32_t> order_;
  int64_t used_ = 0;
  // What the last BuildDecodes left in its layout's block tables: entries of row r from
  // table_dirty_[r] to the row's end are zero, so the next step into the same layout writes a
  // row's own entries and zeroes only those the row held before beyond them (a row's full
  // width, ceil(max_model_len / block_size) entries, is far more than most rows hold).
  // tables_layout_ is that layout's (block_tables, rows, width), all zero when no layout's
  // tables are known: Build writes its words anywhere in them.
  std::tuple<int32_t, int32_t, int32_t> tables_layout_{};
  std::vector<int32_t> table_dirty_;  // [max_num_seqs]
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_FORWARD_BATCH_H_
