// The BPE model: initial symbols (with unknown-token fusing and byte fallback), then merges
// applied lowest rank first, leftmost first among equal ranks, exactly as the Hugging Face
// implementation orders them.

#include <climits>
#include <queue>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"

namespace mlaserve::tokenizer_internal {
namespace {

// Words longer than this bypass the cache (they are rare and would crowd it out).
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kCacheCapacity = 1 << 16;
// Above this many symbols the quadratic scan gives way to a priority queue.
constexpr size_t kMaxSmallWord = 48;

uint64_t PairKey(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

absl::Status ModelError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model (BPE): ", AbslView(what)));
}

absl::Status OptionalString(const nlohmann::json& json, const char* key, std::string* out) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return ModelError(absl::StrCat(key, " must be a string or null"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

}  // namespace

// Reads `merges` ("left right" strings or [left, right] pairs) into merges_, ranked by position.
absl::Status BpeModel::ParseMerges(const nlohmann::json& merges) {
  merges_.reserve(merges.size());
  const size_t prefix_length = continuing_subword_prefix_.size();
  int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos) {
        return ModelError(absl::StrCat("merges[", rank, "] is not \"left right\""));
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return ModelError(absl::StrCat("merges[", rank, "] is neither a string nor a pair"));
    }
    const auto l = vocab_.find(left);
    const auto r = vocab_.find(right);
    const auto merged =
        vocab_.find(absl::StrCat(left, right.substr(std::min(prefix_length, right.size()))));
    if (l == vocab_.end() || r == vocab_.end() || merged == vocab_.end()) {
      return ModelError(absl::StrCat("merges[", rank, "] uses a token that is not in the vocab"));
    }
    // A repeated pair keeps its last rank, as the reference builds its map.
    merges_[PairKey(l->second, r->second)] = {rank, merged->second};
    ++rank;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Parse(const nlohmann::json& json) {
  if (!json.is_object()) return ModelError("model must be an object");
  std::string type;
  if (!JsonString(json, "type", "model", &type).ok() || type != "BPE") {
    return absl::InvalidArgumentError(
        absl::StrCat("model type \"", type, "\" is not supported (supported: BPE)"));
  }
  auto model = std::make_unique<BpeModel>();
  if (const auto it = json.find("dropout");
      it != json.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    return ModelError("dropout is not supported (it makes tokenization random)");
  }
  std::string unk_token;
  const std::pair<const char*, std::string*> strings[] = {
      {"unk_token", &unk_token},
      {"continuing_subword_prefix", &model->continuing_subword_prefix_},
      {"end_of_word_suffix", &model->end_of_word_suffix_}};
  for (const auto& [key, out] : strings) {
    if (auto s = OptionalString(json, key, out); !s.ok()) return s;
  }
  const std::pair<const char*, bool*> flags[] = {{"fuse_unk", &model->fuse_unk_},
                                                 {"byte_fallback", &model->byte_fallback_},
                                                 {"ignore_merges", &model->ignore_merges_}};
  for (const auto& [key, out] : flags) {
    if (auto s = JsonBool(json, key, false, "model", out); !s.ok()) return s;
  }

  const auto vocab = json.find("vocab");
  if (vocab == json.end() || !vocab->is_object()) return ModelError("vocab must be an object");
  model->vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    const std::optional<int32_t> valid = JsonTokenId(id);
    if (!valid.has_value()) {
      return ModelError(
          absl::StrCat("vocab id of \"", token, "\" is not an id in [0, ", kMaxTokenId, "]"));
    }
    model->vocab_[token] = *valid;
  }
  if (!unk_token.empty()) {
    const auto it = model->vocab_.find(unk_token);
    if (it == model->vocab_.end()) return ModelError("unk_token is not in the vocab");
    model->unk_id_ = it->second;
  }

  const auto merges = json.find("merges");
  if (merges == json.end() || !merges->is_array()) return ModelError("merges must be an array");
  if (absl::Status s = model->ParseMerges(*merges); !s.ok()) return s;

  model->accepts_raw_bytes_ =
      model->continuing_subword_prefix_.empty() && model->end_of_word_suffix_.empty();
  for (int b = 0; b < 256 && model->accepts_raw_bytes_; ++b) {
    std::string mapped;
    AppendUtf8(ByteToChar(static_cast<uint8_t>(b)), &mapped);
    const auto it = model->vocab_.find(mapped);
    if (it == model->vocab_.end()) {
      model->accepts_raw_bytes_ = false;
    } else {
      model->byte_ids_[b] = it->second;
    }
  }
  return model;
}

const BpeModel::MergeTarget* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  int32_t pending_unk = -1;  // an unknown token not yet emitted, so that runs can fuse
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    NextCodePoint(word, &pos);
    std::string symbol;
    if (begin > 0) symbol = continuing_subword_prefix_;
    symbol.append(word.substr(begin, pos - begin));
    if (pos == word.size()) symbol += end_of_word_suffix_;
    if (const auto it = vocab_.find(symbol); it != vocab_.end()) {
      if (pending_unk >= 0) symbols->push_back(pending_unk);
      pending_unk = -1;
      symbols->push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      absl::InlinedVector<int32_t, 8> bytes;
      for (const char c : symbol) {
        const auto it = vocab_.find(absl::StrFormat("<0x%02X>", static_cast<uint8_t>(c)));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      // The reference emits the byte tokens ahead of a still-pending unknown token.
      if (bytes.size() == symbol.size()) {
        symbols->insert(symbols->end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_id_) continue;  // no unknown token: the character is dropped
    if (pending_unk >= 0 && !fuse_unk_) symbols->push_back(pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk >= 0) symbols->push_back(pending_unk);
}

void BpeModel::MergeSmall(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  absl::InlinedVector<MergeTarget, kMaxSmallWord> pairs;
  auto lookup = [this, &s](size_t i) {
    const MergeTarget* m = FindMerge(s[i], s[i + 1]);
    return m != nullptr ? *m : MergeTarget{INT32_MAX, -1};
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) pairs.push_back(lookup(i));
  for (;;) {
    size_t best = pairs.size();
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (pairs[i].rank < best_rank) {
        best_rank = pairs[i].rank;
        best = i;
      }
    }
    if (best == pairs.size()) return;
    s[best] = pairs[best].id;
    s.erase(s.begin() + best + 1);
    pairs.erase(pairs.begin() + best);
    if (best > 0) pairs[best - 1] = lookup(best - 1);
    if (best < pairs.size()) pairs[best] = lookup(best);
  }
}

void BpeModel::MergeLarge(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeTarget* m = FindMerge(s[pos], s[next[pos]])) queue.push({m->rank, pos, m->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const MergeTarget* current = FindMerge(s[top.pos], s[next[top.pos]]);
    if (current == nullptr || current->id != top.id) continue;  // stale entry
    const int32_t right = next[top.pos];
    s[top.pos] = top.id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    consider(prev[top.pos]);
    consider(top.pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) s[out++] = s[i];
  }
  s.resize(out);
}

void BpeModel::Tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    thread_local std::string mapped;
    std::string_view word = piece;
    if (raw_bytes) {
      mapped.clear();
      AppendByteLevel(piece, &mapped);
      word = mapped;
    }
    if (const auto it = vocab_.find(AbslView(word)); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_mutex_);
    if (const auto it = cache_.find(AbslView(piece)); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  if (raw_bytes) {
    symbols.reserve(piece.size());
    for (const char c : piece) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  } else {
    InitialSymbols(piece, &symbols);
  }
  if (symbols.size() <= kMaxSmallWord) {
    MergeSmall(&symbols);
  } else {
    MergeLarge(&symbols);
  }
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.try_emplace(std::string(piece), std::move(symbols));
  }
}

}  // namespace mlaserve::tokenizer_internal
