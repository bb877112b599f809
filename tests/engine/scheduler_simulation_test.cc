// Randomized simulation of the scheduler with a fake model runner. Thousands of steps of
// arrivals, shared prefixes, priorities, deadlines, aborts and stop-string finishes, with every
// invariant checked after every step.
//
// The fake runner keeps a fake KV cache: each computed position stores its token id in the slot
// the block table maps it to, and a sampled token is a hash of the tokens read back through the
// block table. So a wrong block table, a wrongly shared prefix block or an overwritten cached
// block changes the generated text, which is compared with an independent reference generation.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/scheduler.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

constexpr int32_t kEos = 1;
constexpr int32_t kStopTokenId = 5;

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return x;
}

// The fake model: the next token is a function of every token so far (a rolling hash).
struct TokenHash {
  uint64_t h = 0x5eed;
  void Add(int32_t token) { h = Mix(h ^ (static_cast<uint64_t>(token) + 0x9e37)); }
  int32_t Next() const { return h % 40 == 0 ? kEos : 3 + static_cast<int32_t>((h >> 8) % 60); }
};

struct SimConfig {
  uint64_t seed = 1;
  int32_t num_requests = 10000;
  SchedulerOptions options;
};

SchedulerOptions SimOptions(bool prefix_caching, int32_t block_size, int32_t num_blocks) {
  SchedulerOptions options;
  options.max_num_seqs = 24;
  options.max_num_batched_tokens = 96;
  options.max_model_len = 192;
  options.max_num_waiting_seqs = 32;
  options.aging_steps_per_priority = 16;
  options.eos_token_ids = {kEos};
  options.kv_cache = {num_blocks, block_size, prefix_caching};
  return options;
}

struct Tracked {
  Request request;  // as submitted (the scheduler gets a copy)
  uint64_t arrival_order = 0;
  int64_t arrival_step = 0;
  std::vector<int32_t> streamed;
  bool ended = false;
  bool completed = false;  // ended by a stop condition or the length limit
  FinishReason reason = FinishReason::kNone;
  int32_t num_preemptions = 0;
};

struct SimStats {
  uint64_t digest = 0xcbf29ce484222325ULL;
  int64_t num_steps = 0;
  int32_t num_rejected = 0;
  int32_t num_preempted_completed = 0;  // preempted at least once, then ended by stop/length
  int32_t num_chunked = 0;              // prefill chunks that did not sample
  int32_t count[5] = {};                // ends by FinishReason
  uint64_t prefix_cache_hit_tokens = 0;
};

// Expected output of a request run alone: tokens streamed and why it ends.
std::pair<std::vector<int32_t>, FinishReason> Reference(const Request& request,
                                                        int32_t max_context_tokens) {
  TokenHash hash;
  for (int32_t t : request.prompt_token_ids) hash.Add(t);
  const StoppingOptions& stop = request.stopping;
  std::vector<int32_t> out;
  auto num_tokens = [&] {
    return static_cast<int32_t>(request.prompt_token_ids.size() + out.size());
  };
  while (true) {
    const int32_t t = hash.Next();
    const bool is_stop = (!stop.ignore_eos && t == kEos) ||
                         std::count(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), t);
    if (is_stop && static_cast<int32_t>(out.size()) >= stop.min_tokens) {
      return {out, FinishReason::kStop};
    }
    out.push_back(t);
    hash.Add(t);
    if (stop.max_tokens && static_cast<int32_t>(out.size()) >= *stop.max_tokens) break;
    if (num_tokens() >= max_context_tokens) break;
  }
  return {out, FinishReason::kLength};
}

class Simulation {
 public:
  explicit Simulation(const SimConfig& config)
      : config_(config),
        scheduler_(WithClock(config.options)),
        rng_(config.seed),
        fake_kv_(static_cast<size_t>(config.options.kv_cache.num_blocks) *
                     config.options.kv_cache.block_size,
                 -1) {
    for (int32_t length : {16, 24, 40, 64, 8, 33}) prefixes_.push_back(RandomTokens(length));
  }

  SimStats Run() {
    while (num_arrivals_ < config_.num_requests || !live_.empty()) {
      if (stats_.num_steps > 200000) {
        ADD_FAILURE() << "no progress";
        break;
      }
      Arrive();
      Step();
      if (::testing::Test::HasFailure()) return stats_;
      Interfere();
    }
    for (const Tracked& t : tracked_) {
      EXPECT_TRUE(t.ended) << t.request.id << " never ended";
      ++stats_.count[static_cast<int>(t.reason)];
      stats_.num_preempted_completed += t.completed && t.num_preemptions > 0;
    }
    stats_.prefix_cache_hit_tokens = scheduler_.kv_block_manager().prefix_cache_hit_tokens();
    EXPECT_FALSE(scheduler_.has_unfinished_seqs());
    return stats_;
  }

 private:
  // Simulated time: step k runs at k seconds, so deadlines expire at known steps.
  SchedulerOptions WithClock(SchedulerOptions options) {
    options.clock = [this] { return Now(); };
    return options;
  }

  int64_t Uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng_() % (hi - lo + 1));
  }
  bool Chance(int percent) { return Uniform(0, 99) < percent; }
  absl::Time Now() const { return absl::UnixEpoch() + absl::Seconds(stats_.num_steps); }
  void Digest(uint64_t v) { stats_.digest = Mix(stats_.digest ^ v); }

  std::vector<int32_t> RandomTokens(int32_t n) {
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) t = static_cast<int32_t>(Uniform(3, 63));
    return tokens;
  }

  Request RandomRequest() {
    Request r;
    r.id = "req-" + std::to_string(num_submitted_);
    if (Chance(60)) {
      r.prompt_token_ids = prefixes_[Uniform(0, prefixes_.size() - 1)];
      const std::vector<int32_t> suffix = RandomTokens(Uniform(1, 60));
      r.prompt_token_ids.insert(r.prompt_token_ids.end(), suffix.begin(), suffix.end());
    } else {
      r.prompt_token_ids = RandomTokens(Uniform(4, 100));
    }
    if (Chance(20)) r.cache_salt = "tenant-" + std::to_string(Uniform(0, 1));
    r.priority = static_cast<int32_t>(Uniform(-1, 2));
    if (Chance(70)) r.stopping.max_tokens = static_cast<int32_t>(Uniform(1, 40));
    if (Chance(10)) r.stopping.min_tokens = static_cast<int32_t>(Uniform(1, 5));
    if (Chance(10)) r.stopping.ignore_eos = true;
    if (Chance(20)) r.stopping.stop_token_ids = {kStopTokenId};
    if (Chance(10)) r.deadline = Now() + absl::Seconds(Uniform(3, 150));
    return r;
  }

  void Arrive() {
    // Alternate overload (queue full, KV pressure) with lighter load.
    const int64_t max_arrivals = (stats_.num_steps / 500) % 2 == 0 ? 3 : 1;
    for (int64_t n = Uniform(0, max_arrivals); n > 0 && num_arrivals_ < config_.num_requests; --n) {
      Request request = RandomRequest();
      ++num_submitted_;
      const absl::Status status = scheduler_.Add(std::make_unique<Sequence>(request));
      if (!status.ok()) {
        EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
        ++stats_.num_rejected;
        continue;
      }
      Tracked& t = tracked_.emplace_back();
      t.request = std::move(request);
      t.arrival_order = num_arrivals_++;
      t.arrival_step = stats_.num_steps;
      index_[t.request.id] = tracked_.size() - 1;
      live_.push_back(tracked_.size() - 1);
    }
  }

  // Aborts, unknown-id aborts and stop-string finishes between steps.
  void Interfere() {
    if (!live_.empty() && Chance(6)) {
      scheduler_.Abort(tracked_[live_[Uniform(0, live_.size() - 1)]].request.id);
    }
    if (Chance(1)) scheduler_.Abort("no-such-request");
    if (!live_.empty() && Chance(2)) {
      const size_t i = live_[Uniform(0, live_.size() - 1)];
      const bool aborted = scheduler_.Find(tracked_[i].request.id) == nullptr;  // just now
      EXPECT_EQ(scheduler_.Finish(tracked_[i].request.id, FinishReason::kStop), !aborted);
      if (!aborted) End(i, FinishReason::kStop, /*by_stop_condition=*/false);
    }
  }

  // `by_stop_condition`: ended by the scheduler's own stop checks, so the whole reference text
  // must have been streamed; otherwise (abort, deadline, stop string) a prefix of it.
  void End(size_t i, FinishReason reason, bool by_stop_condition) {
    Tracked& t = tracked_[i];
    EXPECT_FALSE(t.ended) << t.request.id << " ended twice";
    t.ended = true;
    t.completed = by_stop_condition;
    t.reason = reason;
    live_.erase(std::find(live_.begin(), live_.end(), i));
    const auto [expected, expected_reason] = Reference(t.request, scheduler_.max_context_tokens());
    if (by_stop_condition) {
      EXPECT_EQ(t.streamed, expected) << t.request.id << " preempted " << t.num_preemptions;
      EXPECT_EQ(reason, expected_reason) << t.request.id;
    } else {
      ASSERT_LE(t.streamed.size(), expected.size()) << t.request.id;
      EXPECT_TRUE(std::equal(t.streamed.begin(), t.streamed.end(), expected.begin()))
          << t.request.id << " diverged from the reference";
    }
  }

  // Runs the batch on the fake KV cache; returns the sampled tokens.
  std::vector<int32_t> Execute(const ScheduledBatch& batch) {
    const KvBlockManager& kv = scheduler_.kv_block_manager();
    const int32_t bs = kv.block_size();
    std::vector<int32_t> next;
    for (const ScheduledSeq& item : batch.items) {
      const Sequence& seq = *item.seq;
      for (int32_t p = item.start_position; p < item.start_position + item.num_new_tokens; ++p) {
        const int32_t block = seq.block_table[p / bs];
        EXPECT_EQ(kv.ref_count(block), 1) << "write into a shared block " << block;
        EXPECT_NE(block, KvBlockManager::kDummyBlock);
        fake_kv_[static_cast<size_t>(block) * bs + p % bs] = seq.token_ids[p];
      }
      if (!item.samples_token) continue;
      TokenHash hash;
      for (int32_t p = 0; p < item.start_position + item.num_new_tokens; ++p) {
        hash.Add(fake_kv_[static_cast<size_t>(seq.block_table[p / bs]) * bs + p % bs]);
      }
      next.push_back(hash.Next());
    }
    return next;
  }

  void Step() {
    const absl::Time now = Now();
    Snapshot before;
    for (size_t i : live_) {
      // Aborted ones are gone already; the next batch reports them.
      const Sequence* seq = scheduler_.Find(tracked_[i].request.id);
      if (seq != nullptr) {
        before[seq] = {seq->status != SequenceStatus::kRunning, seq->num_preemptions};
      }
    }
    const ScheduledBatch batch = scheduler_.Schedule();
    for (const SequenceOutput& out : batch.finished) {
      EXPECT_TRUE(out.finish_reason == FinishReason::kAbort ||
                  out.finish_reason == FinishReason::kDeadline);
      End(index_.at(out.request_id), out.finish_reason, /*by_stop_condition=*/false);
    }
    CheckBatch(batch, now, before);
    for (const ScheduledSeq& item : batch.items) {
      tracked_[index_.at(item.seq->id)].num_preemptions = item.seq->num_preemptions;
    }
    const std::vector<int32_t> next = Execute(batch);
    for (const SequenceOutput& out : scheduler_.Postprocess(batch, next)) {
      const size_t i = index_.at(out.request_id);
      EXPECT_FALSE(tracked_[i].ended) << out.request_id << " has output after it ended";
      Digest(std::hash<std::string>()(out.request_id) ^ (out.token.value_or(-1) + 7));
      if (out.token.has_value()) tracked_[i].streamed.push_back(*out.token);
      EXPECT_EQ(out.num_output_tokens, static_cast<int32_t>(tracked_[i].streamed.size()));
      if (out.finished) End(i, out.finish_reason, /*by_stop_condition=*/true);
    }
    ++stats_.num_steps;
    CheckBlocks();
  }

  struct SeqState {
    bool waiting;
    int32_t num_preemptions;
  };
  using Snapshot = absl::flat_hash_map<const Sequence*, SeqState>;

  // Running order: priority, then arrival.
  static bool RanksBelow(const Sequence& a, const Sequence& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.arrival_order > b.arrival_order;
  }

  void CheckBatch(const ScheduledBatch& batch, absl::Time now, const Snapshot& before) {
    const SchedulerOptions& options = config_.options;
    const int32_t bs = options.kv_cache.block_size;
    EXPECT_LE(batch.num_tokens, options.max_num_batched_tokens);
    EXPECT_LE(static_cast<int32_t>(batch.items.size()), options.max_num_seqs);
    EXPECT_LE(scheduler_.num_running_seqs(), options.max_num_seqs);
    int32_t num_tokens = 0;
    int32_t num_samples = 0;
    absl::flat_hash_set<const Sequence*> seen;
    std::vector<const Sequence*> admitted;
    for (size_t k = 0; k < batch.items.size(); ++k) {
      const ScheduledSeq& item = batch.items[k];
      const Sequence& seq = *item.seq;
      Digest(std::hash<std::string>()(seq.id) ^ (uint64_t{1} << 40) * item.num_new_tokens ^
             item.start_position);
      EXPECT_TRUE(seen.insert(&seq).second) << seq.id << " scheduled twice";
      EXPECT_EQ(seq.status, SequenceStatus::kRunning);
      EXPECT_GT(seq.deadline, now) << seq.id << " computed after its deadline";
      EXPECT_GE(item.num_new_tokens, 1);
      EXPECT_EQ(item.start_position, seq.num_computed_tokens);
      EXPECT_LE(item.start_position + item.num_new_tokens, seq.num_tokens());
      EXPECT_EQ(item.samples_token, item.start_position + item.num_new_tokens == seq.num_tokens());
      EXPECT_GE(static_cast<int64_t>(seq.block_table.size()) * bs,
                item.start_position + item.num_new_tokens);
      if (static_cast<int32_t>(k) < batch.num_decodes) {
        EXPECT_TRUE(item.num_new_tokens == 1 && item.samples_token) << "decode expected";
      }
      num_tokens += item.num_new_tokens;
      num_samples += item.samples_token;
      stats_.num_chunked += !item.samples_token;
      if (before.at(&seq).waiting) admitted.push_back(&seq);
    }
    EXPECT_EQ(num_tokens, batch.num_tokens);
    EXPECT_EQ(num_samples, batch.num_samples);
    std::vector<const Sequence*> running;
    std::vector<const Sequence*> preempted;
    const int64_t aging = options.aging_steps_per_priority;
    for (size_t i : live_) {
      const Tracked& y = tracked_[i];
      const Sequence* seq = scheduler_.Find(y.request.id);
      EXPECT_GT(seq->deadline, now) << y.request.id << " outlived its deadline";
      if (seq->num_preemptions > before.at(seq).num_preemptions) preempted.push_back(seq);
      if (seq->status == SequenceStatus::kRunning) {
        EXPECT_FALSE(seq->block_table.empty());
        running.push_back(seq);
        continue;
      }
      EXPECT_TRUE(seq->block_table.empty());
      // Admission order is effective priority; see the bound in scheduler.h.
      for (const Sequence* x_seq : admitted) {
        const Tracked& x = tracked_[index_.at(x_seq->id)];
        const int64_t lead = x.arrival_step - y.arrival_step;
        const int64_t allowed = aging * (x.request.priority - y.request.priority);
        EXPECT_TRUE(lead < allowed || (lead == allowed && x.arrival_order < y.arrival_order))
            << x.request.id << " admitted ahead of " << y.request.id;
      }
    }
    // A victim of preemption is the lowest-ranked running sequence not scheduled yet.
    for (const Sequence* victim : preempted) {
      for (const Sequence* other : running) {
        EXPECT_TRUE(!RanksBelow(*other, *victim) || seen.contains(other))
            << victim->id << " preempted while lower-ranked " << other->id << " kept running";
      }
    }
  }

  // Recounts block ownership from the live sequences and compares with the ref counts.
  void CheckBlocks() {
    const KvBlockManager& kv = scheduler_.kv_block_manager();
    const absl::Status status = kv.CheckInvariants();
    EXPECT_TRUE(status.ok()) << status;
    std::vector<int32_t> owners(kv.num_blocks(), 0);
    for (size_t i : live_) {
      const Sequence* seq = scheduler_.Find(tracked_[i].request.id);
      absl::flat_hash_set<int32_t> own(seq->block_table.begin(), seq->block_table.end());
      EXPECT_EQ(own.size(), seq->block_table.size()) << seq->id << " holds a block twice";
      for (int32_t b : seq->block_table) ++owners[b];
    }
    EXPECT_EQ(owners[KvBlockManager::kDummyBlock], 0);
    int32_t num_used = 0;
    for (int32_t b = 1; b < kv.num_blocks(); ++b) {
      EXPECT_EQ(owners[b], kv.ref_count(b)) << "block " << b;
      num_used += owners[b] > 0;
    }
    EXPECT_EQ(kv.num_free_blocks() + num_used + 1, kv.num_blocks());
  }

  const SimConfig config_;
  Scheduler scheduler_;
  std::mt19937_64 rng_;
  std::vector<int32_t> fake_kv_;  // [num_blocks * block_size] token id stored per slot
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<Tracked> tracked_;
  absl::flat_hash_map<RequestId, size_t> index_;
  std::vector<size_t> live_;
  int32_t num_submitted_ = 0;
  int32_t num_arrivals_ = 0;  // accepted by Add
  SimStats stats_;
};

TEST(SchedulerSimulationTest, TenThousandRequestsKeepEveryInvariant) {
  SimConfig config;
  config.options = SimOptions(/*prefix_caching=*/true, /*block_size=*/8, /*num_blocks=*/161);
  const SimStats stats = Simulation(config).Run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  // The run must have exercised what it checks.
  EXPECT_GT(stats.num_steps, 3000);
  EXPECT_GT(stats.num_rejected, 0);
  EXPECT_GT(stats.num_preempted_completed, 50);
  EXPECT_GT(stats.num_chunked, 100);
  EXPECT_GT(stats.prefix_cache_hit_tokens, 10000u);
  for (FinishReason reason : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort,
                              FinishReason::kDeadline}) {
    EXPECT_GT(stats.count[static_cast<int>(reason)], 20) << FinishReasonName(reason);
  }
}

TEST(SchedulerSimulationTest, WithoutPrefixCachingKeepsEveryInvariant) {
  SimConfig config;
  config.seed = 2;
  config.num_requests = 2000;
  config.options = SimOptions(/*prefix_caching=*/false, /*block_size=*/16, /*num_blocks=*/81);
  const SimStats stats = Simulation(config).Run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_GT(stats.num_preempted_completed, 10);
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 0u);
}

TEST(SchedulerSimulationTest, SameInputsGiveSameBatches) {
  SimConfig config;
  config.seed = 3;
  config.num_requests = 1500;
  config.options = SimOptions(/*prefix_caching=*/true, /*block_size=*/4, /*num_blocks=*/257);
  const SimStats first = Simulation(config).Run();
  const SimStats second = Simulation(config).Run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(first.digest, second.digest);
  EXPECT_EQ(first.num_steps, second.num_steps);
  config.seed = 4;
  EXPECT_NE(Simulation(config).Run().digest, first.digest);
}

}  // namespace
}  // namespace mlaserve
