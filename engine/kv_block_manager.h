// KvBlockManager: hands out the ids of the paged latent KV cache's blocks. Pure CPU bookkeeping:
// it never touches device memory, it decides which block each token position of a sequence is
// written to.
//
// Blocks hold `block_size` consecutive positions of one sequence. A block is either in use
// (ref_count > 0: in the block table of that many live sequences) or free. Block 0 is reserved:
// it is never handed out, so padded batch slots can point at it. Hence, always,
//   num_free_blocks() + num_used_blocks() + 1 == num_blocks().
//
// Prefix caching: once every position of a block is computed, the block is offered to the cache
// under a hash chained over (parent block's hash, the block's token ids), where the chain starts
// from the request's cache_salt. A later sequence whose tokens start with the same blocks takes
// them over (ref_count + 1) instead of recomputing them. Freed cached blocks keep their content
// and stay findable until a new allocation evicts them, least recently freed first; free blocks
// that hold nothing reusable are handed out before any cached one. A hit is confirmed against
// the stored token ids and parent hash, so a 64-bit hash collision cannot serve wrong KV.
//
// Shared blocks are never written: a sequence only writes positions >= num_computed_tokens, and
// a cached prefix always ends on a block boundary at or before that.
//
// Thread-safety: none; owned by the engine thread (through the Scheduler).
#ifndef MLASERVE_ENGINE_KV_BLOCK_MANAGER_H_
#define MLASERVE_ENGINE_KV_BLOCK_MANAGER_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/sequence.h"

namespace mlaserve {

struct KvBlockManagerOptions {
  int32_t num_blocks = 0;   // including the reserved block 0; at least 2
  int32_t block_size = 64;  // tokens per block
  bool enable_prefix_caching = true;
};

class KvBlockManager {
 public:
  static constexpr int32_t kDummyBlock = 0;

  explicit KvBlockManager(const KvBlockManagerOptions& options);

  KvBlockManager(const KvBlockManager&) = delete;
  KvBlockManager& operator=(const KvBlockManager&) = delete;

  // Extends seq.block_hashes over every full block of seq.token_ids. Tokens are only ever
  // appended, so earlier hashes stay valid; call after adding tokens to a sequence (no-op without
  // prefix caching).
  void HashFullBlocks(Sequence& seq) const;

  // Leading tokens of `seq` the prefix cache could serve now: a multiple of block_size and less
  // than seq.num_tokens(), because the last token must be computed to yield logits. 0 without
  // prefix caching. REQUIRES: HashFullBlocks(seq) after its last token was added.
  int32_t NumCachedPrefixTokens(const Sequence& seq) const;

  // Admission of a sequence that holds no blocks: whether its cached prefix plus
  // `num_new_tokens` tokens after it fit.
  bool CanAllocate(const Sequence& seq, int32_t num_new_tokens) const;
  // REQUIRES: CanAllocate(seq, num_new_tokens). Takes over the cached prefix, sets
  // num_computed_tokens to its length (what NumCachedPrefixTokens returned) and adds blocks so
  // that the table covers num_computed_tokens + num_new_tokens. Returns the cached length.
  int32_t Allocate(Sequence& seq, int32_t num_new_tokens);

  // Most new tokens a running sequence can take without anything being preempted: the room left
  // in its last block plus every free block.
  int32_t NumAppendableTokens(const Sequence& seq) const;
  bool CanAppend(const Sequence& seq, int32_t num_new_tokens) const;
  // REQUIRES: CanAppend(seq, num_new_tokens). Makes the block table cover
  // num_computed_tokens + num_new_tokens.
  void Append(Sequence& seq, int32_t num_new_tokens);

  // Offers the blocks completed by num_computed_tokens to the prefix cache. Call after the step
  // that computed them. REQUIRES: HashFullBlocks(seq) covers them.
  void CommitComputedBlocks(Sequence& seq);

  // Releases every block of `seq` and resets its KV state (num_computed_tokens = 0). Idempotent.
  void Free(Sequence& seq);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool enable_prefix_caching() const { return enable_prefix_caching_; }
  int32_t num_free_blocks() const { return num_free_blocks_; }
  int32_t num_used_blocks() const { return num_blocks() - 1 - num_free_blocks_; }
  // Blocks that can ever be handed out: all but the reserved one.
  int32_t num_usable_blocks() const { return num_blocks() - 1; }
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cached_blocks_.size()); }
  int32_t ref_count(int32_t block_id) const { return blocks_[block_id].ref_count; }
  // Fraction of usable blocks in use, in [0, 1].
  double usage() const;
  // Since construction: tokens looked up at admission, and how many of them the cache served.
  uint64_t prefix_cache_query_tokens() const { return prefix_cache_query_tokens_; }
  uint64_t prefix_cache_hit_tokens() const { return prefix_cache_hit_tokens_; }

  // Verifies the free list, ref counts, the cache index and the block accounting identity.
  // O(num_blocks); for tests.
  absl::Status CheckInvariants() const;

 private:
  static constexpr int32_t kNone = -1;

  struct Block {
    int32_t ref_count = 0;
    int32_t prev_free = kNone;  // free-list links, valid while in_free_list
    int32_t next_free = kNone;
    bool in_free_list = false;
    bool cached = false;  // owns cached_blocks_[hash]
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
  };

  int32_t NumBlocksFor(int32_t num_tokens) const;
  uint64_t RootHash(const Sequence& seq) const;
  // Cached block holding the index-th full block of `seq`, or kNone.
  int32_t FindCachedBlock(const Sequence& seq, int32_t index) const;
  int32_t MaxCachedPrefixBlocks(const Sequence& seq) const;
  // Takes a free block for new content, evicting what it cached.
  int32_t TakeFreeBlock();
  void Revive(int32_t block_id);
  void PushFree(int32_t block_id, bool front);
  void Unlink(int32_t block_id);

  const int32_t block_size_;
  const bool enable_prefix_caching_;
  std::vector<Block> blocks_;
  // [num_blocks * block_size] token ids of cached blocks, to confirm hits.
  std::vector<int32_t> block_tokens_;
  absl::flat_hash_map<uint64_t, int32_t> cached_blocks_;  // hash -> block id
  // Free list: evicted from the front; uncached blocks are pushed to the front, cached ones to
  // the back, so the front is "nothing to lose" first, then least recently freed.
  int32_t free_head_ = kNone;
  int32_t free_tail_ = kNone;
  int32_t num_free_blocks_ = 0;
  uint64_t prefix_cache_query_tokens_ = 0;
  uint64_t prefix_cache_hit_tokens_ = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_KV_BLOCK_MANAGER_H_
