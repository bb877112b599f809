#include "engine/forward_batch.h"

#include <algorithm>
#include <utility>

#include "kernels/mla_split_plan.h"

namespace mlaserve {

absl::StatusOr<ForwardBatchBuilder> ForwardBatchBuilder::Create(const ForwardLimits& limits,
                                                                Backend* backend) {
  const int64_t t = limits.max_num_tokens, s = limits.max_num_seqs;
  // ids, positions, slots; two block tables; seq lens, cu_seqlens, logits rows; context rounds.
  int64_t capacity = 3 * t + 2 * s * limits.max_blocks_per_seq + 3 * s + 1 +
                     limits.max_context_rounds * (2 * s + 1);
  if (limits.mla_split_workers > 0) {  // the decodes' split-KV plan
    capacity += s + 1 + 3 * MlaSplitCapacity(s, limits.mla_split_workers, limits.mla_split_rule);
  }
  auto buffer = backend->Allocate(static_cast<size_t>(capacity) * sizeof(int32_t));
  if (!buffer.ok()) return buffer.status();
  return ForwardBatchBuilder(limits, backend, std::move(*buffer), capacity);
}

ForwardBatchBuilder::ForwardBatchBuilder(const ForwardLimits& limits, Backend* backend,
                                         DeviceBuffer buffer, int64_t capacity)
    : limits_(limits),
      backend_(backend),
      buffer_(std::move(buffer)),
      capacity_(capacity),
      host_buffer_(static_cast<int32_t*>(const_cast<void*>(backend->HostAddress(
          TensorView(buffer_.data(), DType::kI32, {capacity}))))),
      staging_(host_buffer_ != nullptr ? 0 : static_cast<size_t>(capacity)),
      table_dirty_(static_cast<size_t>(limits.max_num_seqs)) {}

TensorView ForwardBatchBuilder::Reserve(int64_t n, std::initializer_list<int64_t> shape,
                                        int32_t** host) {
  MLASERVE_CHECK(used_ + n <= capacity_);
  *host = Staged(used_);
  TensorView view(static_cast<int32_t*>(buffer_.data()) + used_, DType::kI32, shape);
  used_ += n;
  return view;
}

int32_t ForwardBatchBuilder::OffsetOf(const TensorView& view) const {
  return static_cast<int32_t>(static_cast<const int32_t*>(view.data()) -
                              static_cast<const int32_t*>(buffer_.data()));
}

namespace {

// The new tokens of `s` from row `token` on: ids, positions and cache slots.
void WriteNewTokens(const StepSequence& s, int64_t bs, int32_t token, int32_t* ids, int32_t* pos,
                    int32_t* slots) {
  for (int32_t j = 0; j < s.num_new_tokens; ++j) {
    const int32_t p = s.start_position + j;
    ids[token + j] = s.token_ids[p];
    pos[token + j] = p;
    slots[token + j] = static_cast<int32_t>(s.block_table[p / bs] * bs + p % bs);
  }
}

// A sequence's row of `width` block-table entries: its own blocks, then zeros over
// [own, zero_to) (the caller knows the rest of the row to be zero already). Entries past its own
// blocks point at block 0 (reserved, never handed out), so a kernel that reads a whole row only
// ever touches valid memory. Returns the count of its own entries.
int32_t WriteTableRow(const StepSequence& s, int32_t width, int32_t zero_to, int32_t* row) {
  const int32_t own = std::min<int32_t>(width, static_cast<int32_t>(s.block_table.size()));
  std::copy_n(s.block_table.begin(), own, row);
  if (zero_to > own) std::fill(row + own, row + zero_to, 0);
  return own;
}

// Padding rows of a graph bucket, decode rows [row, end): token 0 at position 0, no cache write,
// attending over the first row of block 0 (its block-table entries are all 0, written by the
// caller), which is reserved and zeroed at start-up, so they compute finite values from valid
// memory and never touch a live sequence's blocks. Decode row i is token i and logits row i.
void WritePaddingRows(int32_t row, int32_t end, int32_t* ids, int32_t* pos, int32_t* slots,
                      int32_t* len, int32_t* logit_rows) {
  for (; row < end; ++row) {
    ids[row] = 0;
    pos[row] = 0;
    slots[row] = -1;
    len[row] = 1;
    logit_rows[row] = row;
  }
}

// Decode sets of at least this many rows read their lines ahead (BuildDecodes). Measured on
// a Zen 3 host, BuildDecodes' rows: 64 rows 24.6-25.0 us -> 10.4-12.5 us with the reads, 8
// rows unchanged, a single row 0.5 us slower (nothing to overlap its misses with).
constexpr int32_t kReadAheadRows = 8;

// One byte of each line a replay's rows are made from or written to, summed: each row's new
// token and the block-table entries it copies, the buffer's words outside the block tables, and
// in each table row the entries the step writes (the first `dirty[r]` or the row's own ones,
// whichever are more; BuildDecodes).
uint32_t SumStepLines(absl::Span<const StepSequence> seqs, const DecodeLayout& layout,
                      const int32_t* buffer, const int32_t* dirty) {
  uint32_t sum = 0;
  auto words = [](const int32_t* p, int64_t n) {
    return SumLines(p, static_cast<size_t>(n) * sizeof(int32_t));
  };
  const int64_t width = layout.width;
  for (int64_t r = 0; r < layout.rows; ++r) {
    int64_t written = dirty[r];
    if (r < static_cast<int64_t>(seqs.size())) {
      const StepSequence& s = seqs[static_cast<size_t>(r)];
      sum += s.token_ids[s.start_position];
      const int64_t own = std::min<int64_t>(width, static_cast<int64_t>(s.block_table.size()));
      sum += words(s.block_table.data(), own);
      written = std::max(written, own);
    }
    sum += words(buffer + layout.block_tables + r * width, written);
  }
  const int64_t tables_end = layout.block_tables + layout.rows * width;
  sum += words(buffer, layout.block_tables);
  return sum + words(buffer + tables_end, layout.words - tables_end);
}

void CheckFits(const StepSequence& s, int64_t bs) {
  MLASERVE_CHECK(s.num_new_tokens >= 1);
  MLASERVE_CHECK(static_cast<int64_t>(s.block_table.size()) * bs >=
                 s.start_position + s.num_new_tokens);
}

}  // namespace

void ForwardBatchBuilder::WriteSplitPlan(const int32_t* seq_lens, int32_t nd, int32_t* offsets,
                                         int32_t* plan, int64_t items) {
  PlanMlaSplits(absl::MakeConstSpan(seq_lens, nd), limits_.block_size, limits_.mla_split_workers,
                absl::MakeSpan(offsets, nd + 1),
                absl::MakeSpan(reinterpret_cast<MlaSplitItem*>(plan), items),
                limits_.mla_split_rule);
}

void ForwardBatchBuilder::CopyStaged(int64_t words) {
  if (host_buffer_ != nullptr) return;
  backend_->CopyFromHost(staging_.data(), static_cast<size_t>(words) * sizeof(int32_t),
                         TensorView(buffer_.data(), DType::kI32, {words}));
}

DecodeLayout ForwardBatchBuilder::DecodeLayoutOf(const ForwardBatch& padded) const {
  MLASERVE_CHECK(padded.num_prefill_seqs == 0 && padded.num_tokens == padded.num_decodes &&
                 padded.num_logits == padded.num_decodes);
  DecodeLayout layout{.rows = padded.num_decodes,
                      .width = padded.num_blocks_per_seq,
                      .input_ids = OffsetOf(padded.input_ids),
                      .positions = OffsetOf(padded.positions),
                      .slot_mapping = OffsetOf(padded.slot_mapping),
                      .block_tables = OffsetOf(padded.decode_block_tables),
                      .seq_lens = OffsetOf(padded.decode_seq_lens),
                      .prefill_cu_seqlens = OffsetOf(padded.prefill_cu_seqlens),
                      .logits_indices = OffsetOf(padded.logits_indices),
                      .words = static_cast<int32_t>(padded.metadata_words)};
  if (!padded.decode_split_offsets.empty()) {
    layout.split_offsets = OffsetOf(padded.decode_split_offsets);
    layout.split_items = OffsetOf(padded.decode_split_items);
    layout.split_item_count = static_cast<int32_t>(padded.decode_split_items.size(0));
  }
  return layout;
}

void ForwardBatchBuilder::BuildDecodes(absl::Span<const StepSequence> seqs,
                                       const DecodeLayout& layout) {
  const int64_t bs = limits_.block_size;
  const int32_t rows = layout.rows, width = layout.width;
  const auto n = static_cast<int32_t>(seqs.size());
  MLASERVE_CHECK(n <= rows && rows <= static_cast<int32_t>(table_dirty_.size()));
  int32_t* ids = Staged(layout.input_ids);
  int32_t* pos = Staged(layout.positions);
  int32_t* slots = Staged(layout.slot_mapping);
  int32_t* table = Staged(layout.block_tables);
  int32_t* len = Staged(layout.seq_lens);
  int32_t* logit_rows = Staged(layout.logits_indices);
  int32_t* dirty = table_dirty_.data();
  if (tables_layout_ != std::tuple(layout.block_tables, rows, width)) {
    tables_layout_ = {layout.block_tables, rows, width};
    std::fill_n(dirty, rows, width);  // whatever another layout left there
  }
  // A replay begins after the previous step's ops streamed the weights through every cache
  // and TLB, so these lines are in memory, likely on pages the TLB no longer maps. The row
  // loop's stores to such lines stall the loads of the rows after them, so the misses came
  // about one row at a time; loads that nothing waits on overlap them. Prefetch instructions
  // did not (the same measurement: no change), which fits their being dropped on a TLB miss.
  if (n >= kReadAheadRows) KeepLoads(SumStepLines(seqs, layout, Staged(0), dirty));
  for (int32_t i = 0; i < n; ++i) {
    const StepSequence& s = seqs[i];
    CheckFits(s, bs);
    MLASERVE_CHECK(s.num_new_tokens == 1);
    WriteNewTokens(s, bs, i, ids, pos, slots);
    dirty[i] = WriteTableRow(s, width, dirty[i], table + i * width);
    len[i] = s.start_position + 1;
    logit_rows[i] = i;
  }
  for (int32_t i = n; i < rows; ++i) {
    std::fill_n(table + i * width, dirty[i], 0);
    dirty[i] = 0;
  }
  WritePaddingRows(n, rows, ids, pos, slots, len, logit_rows);
  *Staged(layout.prefill_cu_seqlens) = 0;
  if (layout.split_offsets >= 0) {
    WriteSplitPlan(len, rows, Staged(layout.split_offsets), Staged(layout.split_items),
                   layout.split_item_count);
  }
  CopyStaged(layout.words);
}

uint32_t ForwardBatchBuilder::SumDecodeLines(absl::Span<const StepSequence> seqs,
                                             const DecodeLayout& layout) const {
  const int32_t* buffer = host_buffer_ != nullptr ? host_buffer_ : staging_.data();
  // The sequences' array too, which BuildDecodes' read-ahead leaves out: its caller has just
  // read it then.
  return SumLines(this, sizeof(*this)) +
         SumLines(table_dirty_.data(), static_cast<size_t>(layout.rows) * sizeof(int32_t)) +
         SumLines(seqs.data(), seqs.size() * sizeof(StepSequence)) +
         SumStepLines(seqs, layout, buffer, table_dirty_.data());
}

void ForwardBatchBuilder::Build(absl::Span<const StepSequence> seqs, ForwardBatch* fb,
                                int32_t pad_decodes_to) {
  tables_layout_ = {};  // its words may lie anywhere in a decode layout's tables
  const int64_t bs = limits_.block_size;
  // Vectors keep their capacity across steps, so a warmed-up step allocates nothing.
  std::vector<int32_t>& order = order_;  // decodes first, then prefills, stable
  order.clear();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      if ((seqs[i].num_new_tokens == 1) == (pass == 0)) order.push_back(static_cast<int32_t>(i));
    }
  }
  std::vector<int32_t> logit_items = std::move(fb->logit_items);
  std::vector<ContextRound> rounds = std::move(fb->context_rounds);
  logit_items.clear();
  rounds.clear();
  *fb = ForwardBatch{};
  fb->logit_items = std::move(logit_items);
  fb->context_rounds = std::move(rounds);
  int32_t max_blocks = 1;
  for (const StepSequence& s : seqs) {
    CheckFits(s, bs);
    fb->num_tokens += s.num_new_tokens;
    if (s.num_new_tokens == 1) {
      ++fb->num_decodes;
    } else {
      ++fb->num_prefill_seqs;
      fb->num_prefill_tokens += s.num_new_tokens;
      fb->prefill_has_context |= s.start_position > 0;
    }
    if (s.needs_logits) ++fb->num_logits;
    if (s.needs_logits && s.num_new_tokens == 1) ++fb->num_decode_logits;
    max_blocks = std::max(max_blocks, static_cast<int32_t>(
                                          (s.start_position + s.num_new_tokens + bs - 1) / bs));
  }
  int32_t num_padding = 0;
  if (pad_decodes_to > 0) {
    // A replayed graph reads fixed views: every row gets logits and the block tables take
    // their full width, so the layout depends on the bucket alone.
    MLASERVE_CHECK(fb->num_prefill_seqs == 0 && fb->num_decodes <= pad_decodes_to);
    num_padding = pad_decodes_to - fb->num_decodes;
    fb->num_tokens = fb->num_decodes = fb->num_logits = fb->num_decode_logits = pad_decodes_to;
    max_blocks = static_cast<int32_t>(limits_.max_blocks_per_seq);
  }
  MLASERVE_CHECK(fb->num_tokens <= limits_.max_num_tokens);
  MLASERVE_CHECK(fb->num_decodes + fb->num_prefill_seqs <= limits_.max_num_seqs);
  fb->num_blocks_per_seq = max_blocks;

  used_ = 0;
  int32_t *ids, *pos, *slots, *dec_bt, *dec_len, *cu, *pre_bt, *logit_rows;
  const int32_t n = fb->num_tokens, nd = fb->num_decodes, np = fb->num_prefill_seqs;
  fb->input_ids = Reserve(n, {n}, &ids);
  fb->positions = Reserve(n, {n}, &pos);
  fb->slot_mapping = Reserve(n, {n}, &slots);
  fb->decode_block_tables = Reserve(nd * max_blocks, {nd, max_blocks}, &dec_bt);
  fb->decode_seq_lens = Reserve(nd, {nd}, &dec_len);
  fb->prefill_cu_seqlens = Reserve(np + 1, {np + 1}, &cu);
  fb->prefill_block_tables = Reserve(np * max_blocks, {np, max_blocks}, &pre_bt);
  fb->logits_indices = Reserve(fb->num_logits, {fb->num_logits}, &logit_rows);

  int32_t token = 0, decode = 0, prefill = 0, logit = 0;
  cu[0] = 0;
  for (int32_t item : order) {
    const StepSequence& s = seqs[item];
    WriteNewTokens(s, bs, token, ids, pos, slots);
    WriteTableRow(s, max_blocks, max_blocks,
                  s.num_new_tokens == 1 ? dec_bt + decode * max_blocks
                                        : pre_bt + prefill * max_blocks);
    if (s.num_new_tokens == 1) {
      dec_len[decode++] = s.start_position + 1;
    } else {
      cu[prefill + 1] = cu[prefill] + s.num_new_tokens;
      ++prefill;
    }
    token += s.num_new_tokens;
    if (s.needs_logits || pad_decodes_to > 0) {
      logit_rows[logit++] = token - 1;
      fb->logit_items.push_back(item);
    }
  }
  // Padding rows come after the decodes and before any prefill token (a bucket has none).
  MLASERVE_CHECK(num_padding == 0 || (token == decode && decode == logit));
  std::fill(dec_bt + decode * max_blocks, dec_bt + (decode + num_padding) * max_blocks, 0);
  WritePaddingRows(decode, decode + num_padding, ids, pos, slots, dec_len, logit_rows);

  if (limits_.mla_split_workers > 0 && nd > 0) {
    const int64_t items = MlaSplitCapacity(nd, limits_.mla_split_workers, limits_.mla_split_rule);
    int32_t *offsets, *plan;
    fb->decode_split_offsets = Reserve(nd + 1, {nd + 1}, &offsets);
    fb->decode_split_items = Reserve(3 * items, {items, 3}, &plan);
    WriteSplitPlan(dec_len, nd, offsets, plan, items);
  }
  if (fb->prefill_has_context) {
    // Context tokens of all prefill sequences, concatenated, are cut into rounds of at most
    // context_chunk_tokens; a sequence with nothing in a round gets an empty range.
    const int64_t w = limits_.context_chunk_tokens;
    int64_t total = 0;
    for (int32_t i = nd; i < static_cast<int32_t>(order.size()); ++i) {
      total += seqs[order[i]].start_position;
    }
    for (int64_t begin = 0; begin < total; begin += w) {
      const int64_t end = std::min(total, begin + w);
      ContextRound round;
      int32_t *rcu, *rstart;
      round.cu_gather = Reserve(np + 1, {np + 1}, &rcu);
      round.gather_start = Reserve(np, {np}, &rstart);
      rcu[0] = 0;
      int64_t offset = 0;  // concatenated position of this sequence's first context token
      for (int32_t k = 0; k < np; ++k) {
        const int64_t len = seqs[order[nd + k]].start_position;
        const int64_t lo = std::clamp(begin - offset, int64_t{0}, len);
        const int64_t hi = std::clamp(end - offset, int64_t{0}, len);
        rstart[k] = static_cast<int32_t>(lo);
        rcu[k + 1] = rcu[k] + static_cast<int32_t>(hi - lo);
        offset += len;
      }
      round.num_tokens = rcu[np];
      fb->context_rounds.push_back(round);
    }
  }
  fb->metadata_words = used_;
  CopyStaged(used_);
}

}  // namespace mlaserve
