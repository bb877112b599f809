#include "engine/kv_block_manager.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/check.h"

namespace mlaserve {
namespace {

// splitmix64's finalizer: a cheap bijection with full avalanche.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t PackPair(const int32_t* tokens) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tokens[0])) << 32) |
         static_cast<uint32_t>(tokens[1]);
}

// Four independent lanes, so the multiply latency of Mix overlaps across pairs of tokens.
uint64_t HashTokens(uint64_t parent_hash, const int32_t* tokens, int32_t num_tokens) {
  uint64_t lanes[4] = {Mix(parent_hash + 0x9e3779b97f4a7c15ULL), 0x243f6a8885a308d3ULL,
                       0x13198a2e03707344ULL, 0xa4093822299f31d0ULL};
  int32_t i = 0;
  for (; i + 8 <= num_tokens; i += 8) {
    for (int lane = 0; lane < 4; ++lane) {
      lanes[lane] = Mix(lanes[lane] ^ PackPair(tokens + i + 2 * lane));
    }
  }
  for (; i + 2 <= num_tokens; i += 2) lanes[0] = Mix(lanes[0] ^ PackPair(tokens + i));
  if (i < num_tokens) lanes[0] = Mix(lanes[0] ^ static_cast<uint32_t>(tokens[i]) ^ (1ULL << 63));
  return Mix(lanes[0] ^ Mix(lanes[1] ^ Mix(lanes[2] ^ Mix(lanes[3] ^ num_tokens))));
}

template <typename... Args>
absl::Status Fail(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InternalError(absl::StrFormat(format, args...));
}

constexpr uint64_t kUnsaltedRoot = 0x6d6c617365727665ULL;  // any constant
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

}  // namespace

KvBlockManager::KvBlockManager(const KvBlockManagerOptions& options)
    : block_size_(options.block_size),
      enable_prefix_caching_(options.enable_prefix_caching),
      blocks_(options.num_blocks) {
  MLASERVE_CHECK(options.num_blocks >= 2);
  MLASERVE_CHECK(options.block_size >= 1);
  if (enable_prefix_caching_) {
    block_tokens_.resize(static_cast<size_t>(options.num_blocks) * block_size_);
  }
  for (int32_t b = 1; b < options.num_blocks; ++b) PushFree(b, /*front=*/false);
}

int32_t KvBlockManager::NumBlocksFor(int32_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

uint64_t KvBlockManager::RootHash(const Sequence& seq) const {
  if (!seq.cache_salt.has_value()) return kUnsaltedRoot;
  uint64_t h = kFnvOffset;
  for (unsigned char c : *seq.cache_salt) h = (h ^ c) * kFnvPrime;
  return Mix(h);
}

void KvBlockManager::HashFullBlocks(Sequence& seq) const {
  if (!enable_prefix_caching_) return;
  // Called after every sampled token: multiply, not divide, to find there is nothing to do.
  for (auto i = static_cast<int32_t>(seq.block_hashes.size());
       static_cast<int64_t>(i + 1) * block_size_ <= seq.num_tokens(); ++i) {
    const uint64_t parent = i == 0 ? RootHash(seq) : seq.block_hashes[i - 1];
    seq.block_hashes.push_back(HashTokens(
        parent, seq.token_ids.data() + static_cast<size_t>(i) * block_size_, block_size_));
  }
}

int32_t KvBlockManager::FindCachedBlock(const Sequence& seq, int32_t index) const {
  const uint64_t hash = seq.block_hashes[index];
  const auto it = cached_blocks_.find(hash);
  if (it == cached_blocks_.end()) return kNone;
  const Block& block = blocks_[it->second];
  const uint64_t parent = index == 0 ? RootHash(seq) : seq.block_hashes[index - 1];
  const size_t offset = static_cast<size_t>(index) * block_size_;
  if (block.parent_hash != parent ||
      std::memcmp(block_tokens_.data() + static_cast<size_t>(it->second) * block_size_,
                  seq.token_ids.data() + offset, sizeof(int32_t) * block_size_) != 0) {
    return kNone;
  }
  return it->second;
}

int32_t KvBlockManager::MaxCachedPrefixBlocks(const Sequence& seq) const {
  if (!enable_prefix_caching_) return 0;
  MLASERVE_CHECK_MSG(
      static_cast<int32_t>(seq.block_hashes.size()) == seq.num_tokens() / block_size_,
      "HashFullBlocks was not called after tokens were added");
  return (seq.num_tokens() - 1) / block_size_;
}

int32_t KvBlockManager::NumCachedPrefixTokens(const Sequence& seq) const {
  const int32_t max_blocks = MaxCachedPrefixBlocks(seq);
  int32_t n = 0;
  while (n < max_blocks && FindCachedBlock(seq, n) != kNone) ++n;
  return n * block_size_;
}

bool KvBlockManager::CanAllocate(const Sequence& seq, int32_t num_new_tokens) const {
  MLASERVE_CHECK(seq.block_table.empty());
  const int32_t max_blocks = MaxCachedPrefixBlocks(seq);
  int32_t num_hit = 0;
  int32_t num_revived = 0;  // hits that sit in the free list and leave it
  for (; num_hit < max_blocks; ++num_hit) {
    const int32_t b = FindCachedBlock(seq, num_hit);
    if (b == kNone) break;
    if (blocks_[b].ref_count == 0) ++num_revived;
  }
  const int32_t num_fresh = NumBlocksFor(num_hit * block_size_ + num_new_tokens) - num_hit;
  return num_revived + num_fresh <= num_free_blocks_;
}

int32_t KvBlockManager::Allocate(Sequence& seq, int32_t num_new_tokens) {
  MLASERVE_CHECK(CanAllocate(seq, num_new_tokens));
  const int32_t max_blocks = MaxCachedPrefixBlocks(seq);
  for (int32_t i = 0; i < max_blocks; ++i) {
    const int32_t b = FindCachedBlock(seq, i);
    if (b == kNone) break;
    Revive(b);
    seq.block_table.push_back(b);
  }
  const auto num_hit = static_cast<int32_t>(seq.block_table.size());
  seq.num_committed_blocks = num_hit;
  seq.num_computed_tokens = num_hit * block_size_;
  if (enable_prefix_caching_) {
    prefix_cache_query_tokens_ += static_cast<uint64_t>(seq.num_tokens());
    prefix_cache_hit_tokens_ += static_cast<uint64_t>(seq.num_computed_tokens);
  }
  Append(seq, num_new_tokens);
  return seq.num_computed_tokens;
}

int32_t KvBlockManager::NumAppendableTokens(const Sequence& seq) const {
  const int64_t slack =
      static_cast<int64_t>(seq.block_table.size()) * block_size_ - seq.num_computed_tokens;
  const int64_t room = slack + static_cast<int64_t>(num_free_blocks_) * block_size_;
  return static_cast<int32_t>(std::min<int64_t>(room, INT32_MAX));
}

bool KvBlockManager::CanAppend(const Sequence& seq, int32_t num_new_tokens) const {
  const int64_t capacity = static_cast<int64_t>(seq.block_table.size()) * block_size_;
  if (seq.num_computed_tokens + num_new_tokens <= capacity) return true;  // most decodes
  const int32_t needed = NumBlocksFor(seq.num_computed_tokens + num_new_tokens) -
                         static_cast<int32_t>(seq.block_table.size());
  return needed <= num_free_blocks_;
}

void KvBlockManager::Append(Sequence& seq, int32_t num_new_tokens) {
  MLASERVE_CHECK(num_new_tokens >= 0);
  MLASERVE_CHECK(CanAppend(seq, num_new_tokens));
  const int32_t num_tokens = seq.num_computed_tokens + num_new_tokens;
  while (static_cast<int64_t>(seq.block_table.size()) * block_size_ < num_tokens) {
    seq.block_table.push_back(TakeFreeBlock());
  }
}

void KvBlockManager::CommitComputedBlocks(Sequence& seq) {
  if (static_cast<int64_t>(seq.num_committed_blocks + 1) * block_size_ > seq.num_computed_tokens) {
    return;  // most steps complete no block
  }
  const int32_t num_complete = seq.num_computed_tokens / block_size_;
  if (!enable_prefix_caching_) {
    seq.num_committed_blocks = std::max(seq.num_committed_blocks, num_complete);
    return;
  }
  MLASERVE_CHECK(static_cast<int32_t>(seq.block_hashes.size()) >= num_complete);
  MLASERVE_CHECK(static_cast<int32_t>(seq.block_table.size()) >= num_complete);
  for (int32_t i = seq.num_committed_blocks; i < num_complete; ++i) {
    const uint64_t hash = seq.block_hashes[i];
    // Another sequence may have computed the same content first; its block stays the one found.
    if (cached_blocks_.contains(hash)) continue;
    const int32_t b = seq.block_table[i];
    Block& block = blocks_[b];
    block.cached = true;
    block.hash = hash;
    block.parent_hash = i == 0 ? RootHash(seq) : seq.block_hashes[i - 1];
    std::memcpy(block_tokens_.data() + static_cast<size_t>(b) * block_size_,
                seq.token_ids.data() + static_cast<size_t>(i) * block_size_,
                sizeof(int32_t) * block_size_);
    cached_blocks_.emplace(hash, b);
  }
  seq.num_committed_blocks = std::max(seq.num_committed_blocks, num_complete);
}

void KvBlockManager::Free(Sequence& seq) {
  // Reverse order: a sequence's later blocks are the least likely to be shared again, so they
  // are pushed first and evicted first.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) {
    Block& block = blocks_[*it];
    MLASERVE_CHECK(block.ref_count > 0);
    if (--block.ref_count == 0) PushFree(*it, /*front=*/!block.cached);
  }
  seq.block_table.clear();
  seq.num_committed_blocks = 0;
  seq.num_computed_tokens = 0;
}

double KvBlockManager::usage() const {
  return static_cast<double>(num_used_blocks()) / num_usable_blocks();
}

int32_t KvBlockManager::TakeFreeBlock() {
  MLASERVE_CHECK(free_head_ != kNone);
  const int32_t b = free_head_;
  Unlink(b);
  Block& block = blocks_[b];
  if (block.cached) {
    cached_blocks_.erase(block.hash);
    block.cached = false;
  }
  block.ref_count = 1;
  return b;
}

void KvBlockManager::Revive(int32_t block_id) {
  Block& block = blocks_[block_id];
  if (block.ref_count == 0) Unlink(block_id);
  ++block.ref_count;
}

void KvBlockManager::PushFree(int32_t block_id, bool front) {
  Block& block = blocks_[block_id];
  MLASERVE_CHECK(!block.in_free_list && block.ref_count == 0);
  block.in_free_list = true;
  if (free_head_ == kNone) {
    block.prev_free = block.next_free = kNone;
    free_head_ = free_tail_ = block_id;
  } else if (front) {
    block.prev_free = kNone;
    block.next_free = free_head_;
    blocks_[free_head_].prev_free = block_id;
    free_head_ = block_id;
  } else {
    block.next_free = kNone;
    block.prev_free = free_tail_;
    blocks_[free_tail_].next_free = block_id;
    free_tail_ = block_id;
  }
  ++num_free_blocks_;
}

void KvBlockManager::Unlink(int32_t block_id) {
  Block& block = blocks_[block_id];
  MLASERVE_CHECK(block.in_free_list);
  if (block.prev_free == kNone) {
    free_head_ = block.next_free;
  } else {
    blocks_[block.prev_free].next_free = block.next_free;
  }
  if (block.next_free == kNone) {
    free_tail_ = block.prev_free;
  } else {
    blocks_[block.next_free].prev_free = block.prev_free;
  }
  block.prev_free = block.next_free = kNone;
  block.in_free_list = false;
  --num_free_blocks_;
}

absl::Status KvBlockManager::CheckInvariants() const {
  const int32_t n = num_blocks();
  int32_t num_listed = 0;
  int32_t prev = kNone;
  for (int32_t b = free_head_; b != kNone; prev = b, b = blocks_[b].next_free) {
    if (b <= 0 || b >= n) return Fail("free list holds invalid block %d", b);
    if (++num_listed > n) return Fail("free list has a cycle");
    const Block& block = blocks_[b];
    if (!block.in_free_list || block.ref_count != 0 || block.prev_free != prev) {
      return Fail("free block %d: in_list=%d ref=%d", b, int{block.in_free_list}, block.ref_count);
    }
  }
  if (prev != free_tail_) return Fail("free list tail is %d, expected %d", free_tail_, prev);
  if (num_listed != num_free_blocks_) {
    return Fail("%d blocks listed free, counter says %d", num_listed, num_free_blocks_);
  }
  if (blocks_[kDummyBlock].ref_count != 0 || blocks_[kDummyBlock].in_free_list) {
    return Fail("the reserved block was handed out");
  }
  int32_t num_used = 0;
  for (int32_t b = 1; b < n; ++b) {
    const Block& block = blocks_[b];
    if (block.ref_count < 0) return Fail("block %d has ref count %d", b, block.ref_count);
    if (block.ref_count > 0) ++num_used;
    if ((block.ref_count == 0) != block.in_free_list) {
      return Fail("block %d: ref count %d but in_free_list=%d", b, block.ref_count,
                  int{block.in_free_list});
    }
    if (block.cached) {
      const auto it = cached_blocks_.find(block.hash);
      if (it == cached_blocks_.end() || it->second != b) {
        return Fail("cached block %d is not indexed under its hash", b);
      }
    }
  }
  for (const auto& [hash, b] : cached_blocks_) {
    if (b <= 0 || b >= n || !blocks_[b].cached || blocks_[b].hash != hash) {
      return Fail("cache index entry points at block %d that does not hold it", b);
    }
  }
  if (num_free_blocks_ + num_used + 1 != n) {
    return Fail("free %d + used %d + 1 != %d blocks", num_free_blocks_, num_used, n);
  }
  return absl::OkStatus();
}

}  // namespace mlaserve
