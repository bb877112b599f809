#include "engine/kv_block_manager.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

using ::testing::Contains;
using ::testing::Not;

std::unique_ptr<Sequence> MakeSeq(std::vector<int32_t> tokens,
                                  std::optional<std::string> salt = std::nullopt) {
  Request request;
  request.id = "r";
  request.prompt_token_ids = std::move(tokens);
  request.cache_salt = std::move(salt);
  return std::make_unique<Sequence>(std::move(request));
}

KvBlockManagerOptions Options(int32_t num_blocks, int32_t block_size, bool caching = true) {
  return KvBlockManagerOptions{num_blocks, block_size, caching};
}

// Admits `seq` with its whole prompt and marks it computed, as a finished prefill step would.
void Prefill(KvBlockManager& kv, Sequence& seq) {
  kv.HashFullBlocks(seq);
  const int32_t cached = kv.NumCachedPrefixTokens(seq);
  ASSERT_TRUE(kv.CanAllocate(seq, seq.num_tokens() - cached));
  kv.Allocate(seq, seq.num_tokens() - cached);
  seq.num_computed_tokens = seq.num_tokens();
  kv.CommitComputedBlocks(seq);
}

TEST(KvBlockManagerTest, ReservedBlockIsNeverHandedOut) {
  KvBlockManager kv(Options(5, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  kv.HashFullBlocks(*a);
  ASSERT_TRUE(kv.CanAllocate(*a, 16));
  kv.Allocate(*a, 16);
  EXPECT_THAT(a->block_table, Not(Contains(KvBlockManager::kDummyBlock)));
  EXPECT_EQ(a->block_table.size(), 4u);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(kv.num_used_blocks(), 4);
  EXPECT_DOUBLE_EQ(kv.usage(), 1.0);
  a->num_computed_tokens = 16;
  EXPECT_FALSE(kv.CanAppend(*a, 1));
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, AppendGrowsByBlocksAndFreeIsIdempotent) {
  KvBlockManager kv(Options(9, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5});
  kv.HashFullBlocks(*a);
  kv.Allocate(*a, 3);  // a first chunk of the prompt
  EXPECT_EQ(a->block_table.size(), 1u);
  a->num_computed_tokens = 3;
  EXPECT_EQ(kv.NumAppendableTokens(*a), 1 + 7 * 4);  // room in its block + every free block
  EXPECT_TRUE(kv.CanAppend(*a, 1));
  kv.Append(*a, 1);
  EXPECT_EQ(a->block_table.size(), 1u);  // position 3 still fits the first block
  kv.Append(*a, 2);
  EXPECT_EQ(a->block_table.size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.NumAppendableTokens(*a), 5 + 6 * 4);
  EXPECT_TRUE(kv.CanAppend(*a, 5 + 6 * 4));
  EXPECT_FALSE(kv.CanAppend(*a, 5 + 6 * 4 + 1));
  kv.Free(*a);
  EXPECT_TRUE(a->block_table.empty());
  EXPECT_EQ(a->num_computed_tokens, 0);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  kv.Free(*a);
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, CanAllocateRefusesMoreThanIsFree) {
  KvBlockManager kv(Options(3, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8, 9});
  kv.HashFullBlocks(*a);
  EXPECT_TRUE(kv.CanAllocate(*a, 8));
  EXPECT_FALSE(kv.CanAllocate(*a, 9));
}

TEST(KvBlockManagerTest, CachedPrefixIsSharedAndSkipped) {
  KvBlockManager kv(Options(16, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  Prefill(kv, *a);
  EXPECT_EQ(kv.num_cached_blocks(), 2);  // the partial third block is not cacheable
  EXPECT_EQ(kv.prefix_cache_hit_tokens(), 0u);

  auto b = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44});
  kv.HashFullBlocks(*b);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*b), 8);
  ASSERT_TRUE(kv.CanAllocate(*b, 3));
  EXPECT_EQ(kv.Allocate(*b, 3), 8);
  EXPECT_EQ(b->num_computed_tokens, 8);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->block_table[1], a->block_table[1]);
  EXPECT_NE(b->block_table[2], a->block_table[2]);
  EXPECT_EQ(kv.ref_count(a->block_table[0]), 2);
  EXPECT_EQ(kv.ref_count(a->block_table[2]), 1);
  EXPECT_EQ(kv.num_used_blocks(), 4);
  EXPECT_EQ(kv.prefix_cache_query_tokens(), 21u);
  EXPECT_EQ(kv.prefix_cache_hit_tokens(), 8u);
  kv.Free(*a);
  EXPECT_EQ(kv.ref_count(b->block_table[0]), 1);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, LastPromptTokenIsAlwaysComputed) {
  KvBlockManager kv(Options(16, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8});
  Prefill(kv, *a);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  auto b = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8});
  kv.HashFullBlocks(*b);
  // Both blocks are cached, but serving the second would leave nothing to compute logits from.
  EXPECT_EQ(kv.NumCachedPrefixTokens(*b), 4);
  auto c = MakeSeq({1, 2, 3, 4});
  kv.HashFullBlocks(*c);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*c), 0);
}

TEST(KvBlockManagerTest, SaltSeparatesCaches) {
  KvBlockManager kv(Options(16, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5}, "tenant-a");
  Prefill(kv, *a);
  auto same_salt = MakeSeq({1, 2, 3, 4, 5}, "tenant-a");
  auto other_salt = MakeSeq({1, 2, 3, 4, 5}, "tenant-b");
  auto no_salt = MakeSeq({1, 2, 3, 4, 5});
  for (auto* s : {same_salt.get(), other_salt.get(), no_salt.get()}) kv.HashFullBlocks(*s);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*same_salt), 4);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*other_salt), 0);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*no_salt), 0);
}

TEST(KvBlockManagerTest, BlockHashDependsOnItsWholePrefix) {
  KvBlockManager kv(Options(16, 2));
  auto a = MakeSeq({1, 2, 7, 8, 9});
  auto b = MakeSeq({3, 4, 7, 8, 9});
  kv.HashFullBlocks(*a);
  kv.HashFullBlocks(*b);
  ASSERT_EQ(a->block_hashes.size(), 2u);
  EXPECT_NE(a->block_hashes[1], b->block_hashes[1]);  // same tokens, different parent
  auto a2 = MakeSeq({1, 2, 7, 8, 10});
  kv.HashFullBlocks(*a2);
  EXPECT_EQ(a->block_hashes, a2->block_hashes);
}

TEST(KvBlockManagerTest, FreedBlocksAreReusedUncachedFirstThenLeastRecentlyFreed) {
  KvBlockManager kv(Options(5, 2));
  auto a = MakeSeq({1, 2, 3, 4, 5});
  Prefill(kv, *a);  // blocks: [1 2] [3 4] cached, [5] uncached
  kv.Free(*a);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.num_cached_blocks(), 2);

  auto b = MakeSeq({9, 9, 9, 9});
  kv.HashFullBlocks(*b);
  kv.Allocate(*b, 4);  // takes the uncached block and the never-used one
  auto again = MakeSeq({1, 2, 3, 4, 5});
  kv.HashFullBlocks(*again);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*again), 4);

  b->num_computed_tokens = 4;
  kv.Append(*b, 1);  // evicts a's later block first, keeping its first one findable
  EXPECT_EQ(kv.NumCachedPrefixTokens(*again), 2);
  b->num_computed_tokens = 5;
  kv.Append(*b, 2);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*again), 0);
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, HitOnFreedBlocksTakesThemOffTheFreeList) {
  KvBlockManager kv(Options(5, 2));
  auto a = MakeSeq({1, 2, 3, 4, 5});
  Prefill(kv, *a);
  kv.Free(*a);
  auto b = MakeSeq({1, 2, 3, 4, 5, 6, 7});
  kv.HashFullBlocks(*b);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*b), 4);
  EXPECT_TRUE(kv.CanAllocate(*b, 3));   // 2 revived + 2 fresh of 4 free
  EXPECT_FALSE(kv.CanAllocate(*b, 5));  // 2 revived + 3 fresh
  kv.Allocate(*b, 3);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(b->block_table.size(), 4u);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, ConcurrentIdenticalPrefillsKeepOneCachedCopy) {
  KvBlockManager kv(Options(16, 2));
  auto a = MakeSeq({1, 2, 3, 4, 5});
  auto b = MakeSeq({1, 2, 3, 4, 5});
  for (auto* s : {a.get(), b.get()}) {
    kv.HashFullBlocks(*s);
    kv.Allocate(*s, 5);  // both miss: neither is computed yet
  }
  for (auto* s : {a.get(), b.get()}) {
    s->num_computed_tokens = 5;
    kv.CommitComputedBlocks(*s);
  }
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  const std::vector<int32_t> a_blocks = a->block_table;
  kv.Free(*a);
  kv.Free(*b);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
  auto c = MakeSeq({1, 2, 3, 4, 9});
  kv.HashFullBlocks(*c);
  kv.Allocate(*c, 1);
  EXPECT_EQ(c->num_computed_tokens, 4);
  EXPECT_EQ(c->block_table[0], a_blocks[0]);  // the copy committed first
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

TEST(KvBlockManagerTest, CommitsOnlyCompletelyComputedBlocks) {
  KvBlockManager kv(Options(16, 4));
  auto a = MakeSeq({1, 2, 3, 4, 5, 6, 7, 8, 9});
  kv.HashFullBlocks(*a);
  kv.Allocate(*a, 6);
  a->num_computed_tokens = 6;
  kv.CommitComputedBlocks(*a);
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  EXPECT_EQ(a->num_committed_blocks, 1);
  kv.Append(*a, 3);
  a->num_computed_tokens = 9;
  kv.CommitComputedBlocks(*a);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
}

TEST(KvBlockManagerTest, WithoutPrefixCachingNothingIsShared) {
  KvBlockManager kv(Options(16, 2, /*caching=*/false));
  auto a = MakeSeq({1, 2, 3, 4, 5});
  Prefill(kv, *a);
  EXPECT_TRUE(a->block_hashes.empty());
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  kv.Free(*a);
  auto b = MakeSeq({1, 2, 3, 4, 5});
  kv.HashFullBlocks(*b);
  EXPECT_EQ(kv.NumCachedPrefixTokens(*b), 0);
  kv.Allocate(*b, 5);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(kv.prefix_cache_query_tokens(), 0u);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants();
}

}  // namespace
}  // namespace mlaserve
