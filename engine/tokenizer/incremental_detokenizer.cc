#include "engine/tokenizer/incremental_detokenizer.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace mlaserve {
namespace {

// Length of the longest proper prefix of `stop` that `text` ends with.
size_t PartialMatchLength(std::string_view text, std::string_view stop) {
  for (size_t k = std::min(text.size(), stop.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == stop.substr(0, k)) return k;
  }
  return 0;
}

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               DetokenizerOptions options)
    : stream_(tokenizer.NewDecodeStream(options.skip_special_tokens)),
      options_(std::move(options)) {
  options_.stop.erase(std::remove(options_.stop.begin(), options_.stop.end(), std::string()),
                      options_.stop.end());
}

std::optional<std::string> IncrementalDetokenizer::Add(int32_t id, std::string* out) {
  if (stopped() || finished_) return std::nullopt;
  stream_.Add(id, &held_);
  return Release(/*final=*/false, out);
}

std::optional<std::string> IncrementalDetokenizer::Finish(std::string* out) {
  if (stopped() || finished_) return std::nullopt;
  finished_ = true;
  stream_.Finish(&held_);
  return Release(/*final=*/true, out);
}

std::optional<std::string> IncrementalDetokenizer::Release(bool final, std::string* out) {
  size_t best_end = std::string::npos, best_begin = 0;
  const std::string* best = nullptr;
  for (const std::string& stop : options_.stop) {
    const size_t begin = held_.find(stop);
    if (begin == std::string::npos) continue;
    const size_t end = begin + stop.size();
    if (end < best_end || (end == best_end && begin < best_begin)) {
      best_end = end;
      best_begin = begin;
      best = &stop;
    }
  }
  if (best != nullptr) {
    out->append(held_, 0, options_.include_stop_str_in_output ? best_end : best_begin);
    held_.clear();
    matched_stop_ = *best;
    return matched_stop_;
  }
  size_t keep = 0;
  if (!final) {
    for (const std::string& stop : options_.stop) {
      keep = std::max(keep, PartialMatchLength(held_, stop));
    }
    // Stop strings are text, but never release half a character whatever they hold.
    while (keep > 0 && keep < held_.size() && IsContinuationByte(held_[held_.size() - keep])) {
      ++keep;
    }
  }
  out->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return std::nullopt;
}

}  // namespace mlaserve
