// The stages of a Hugging Face tokenizer.json pipeline, as used by engine/tokenizer/tokenizer.cc:
// added-token matching, normalizers, pre-tokenizers, the BPE model, post-processors and the
// streaming decoder. Each Parse* function validates its JSON section and returns an error that
// names the component and field it cannot handle. Built components are immutable and their
// const methods are thread-safe; DecoderPipeline::State is per stream.

#ifndef MLASERVE_ENGINE_TOKENIZER_COMPONENTS_H_
#define MLASERVE_ENGINE_TOKENIZER_COMPONENTS_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace mlaserve::tokenizer_internal {

// Text being pre-tokenized: views into the input or into `storage`, which keeps the text
// that transformations produce at stable addresses.
struct Pieces {
  std::vector<std::string_view> views;
  std::deque<std::string> storage;

  std::string_view Store(std::string text) {
    storage.push_back(std::move(text));
    return storage.back();
  }
};

// The byte <-> character mapping of GPT-2's byte-level BPE: printable bytes map to themselves,
// the others to U+0100 onwards.
char32_t ByteToChar(uint8_t byte);
// Returns the byte of a mapped character, or -1 when `c` is not one.
int CharToByte(char32_t c);
// Appends the mapped characters of `bytes` as UTF-8.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Reads an optional JSON member; a member of the wrong type is an error naming `where`.
absl::Status JsonBool(const nlohmann::json& object, const char* key, bool fallback,
                      std::string_view where, bool* out);
absl::Status JsonString(const nlohmann::json& object, const char* key, std::string_view where,
                        std::string* out);

// Token ids index dense tables, so tokenizer.json may not use ids above this (16 times the
// largest vocabulary in use, 262,144): a corrupt file cannot make the tables huge.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;
// The id `json` holds when it is an integer in [0, kMaxTokenId].
std::optional<int32_t> JsonTokenId(const nlohmann::json& json);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string Normalize(std::string_view text) const = 0;
};
// Returns nullptr for a JSON null.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& json);

// Added tokens (tokenizer.json "added_tokens"): matched in the raw text before normalization
// (normalized == false) or in each normalized segment (normalized == true), leftmost-longest.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  // `normalizer` (may be null) is applied to the patterns of normalized tokens.
  AddedTokenMatcher(const std::vector<const AddedToken*>& tokens, const Normalizer* normalizer);

  struct Segment {
    std::string_view text;
    int32_t id;  // -1 for text between added tokens
  };
  // Splits `text` as the Hugging Face AddedVocabulary::find_matches does, honouring the tokens'
  // lstrip, rstrip and single_word flags.
  void Split(std::string_view text, std::vector<Segment>* out) const;

 private:
  struct Pattern {
    std::string text;
    const AddedToken* token;
  };
  // Longest pattern that starts at text[pos], or nullptr.
  const Pattern* LongestAt(std::string_view text, size_t pos) const;

  std::vector<Pattern> patterns_;
  absl::flat_hash_map<uint64_t, int32_t> trie_;  // node << 8 | byte -> child node
  std::vector<int32_t> terminal_;                // node -> pattern index or -1
  std::array<bool, 256> first_byte_{};
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void PreTokenize(Pieces* pieces) const = 0;
};
struct PreTokenizerChain {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  // True when the last step is ByteLevel and, as asked, it left its byte-to-character mapping
  // to the model: the pieces then hold raw bytes.
  bool defers_byte_mapping = false;
};
// `defer_byte_mapping`: the model can take raw bytes in place of mapped characters.
absl::StatusOr<PreTokenizerChain> ParsePreTokenizer(const nlohmann::json& json,
                                                    bool defer_byte_mapping);

class BpeModel {
 public:
  static absl::StatusOr<std::unique_ptr<BpeModel>> Parse(const nlohmann::json& json);

  // Appends the ids of one pre-tokenized piece. With `raw_bytes` the piece holds bytes that the
  // ByteLevel pre-tokenizer would have mapped to characters (see AcceptsRawBytes()).
  void Tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>* ids) const;
  // True when every byte-level character is in the vocabulary and no affixes are configured,
  // so the model can start from bytes directly.
  bool AcceptsRawBytes() const { return accepts_raw_bytes_; }
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  absl::Status ParseMerges(const nlohmann::json& merges);
  struct MergeTarget {
    int32_t rank;
    int32_t id;
  };
  void InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  const MergeTarget* FindMerge(int32_t left, int32_t right) const;
  void MergeSmall(std::vector<int32_t>* symbols) const;
  void MergeLarge(std::vector<int32_t>* symbols) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool accepts_raw_bytes_ = false;
  std::array<int32_t, 256> byte_ids_{};  // raw byte -> id of its byte-level character

  // Words already tokenized; bounded, filled until full like the reference implementation.
  mutable absl::Mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mutex_);
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void Process(bool add_special_tokens, std::vector<int32_t>* ids) const = 0;
};
// Returns nullptr for a JSON null.
absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const nlohmann::json& json);

// Per-stream state of a DecoderPipeline.
struct DecoderState {
  struct Stage {
    std::string pending;   // bytes, or text that may still change
    bool started = false;  // a streaming Strip stage has decided the leading run
  };
  std::vector<Stage> stages;
  bool any_token = false;
};

// The decoder as a streaming transducer: Decode(tokens) == Push(each token) + Finish(), with
// output appended as soon as later tokens can no longer change it.
class DecoderPipeline {
 public:
  // A JSON null gives the library default: tokens joined by a space.
  static absl::StatusOr<DecoderPipeline> Parse(const nlohmann::json& json);

  enum class StageKind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel };
  struct Stage {
    StageKind kind;
    bool stream = false;  // after a Fuse or ByteLevel stage: receives pieces of one token
    std::string pattern;  // kReplace
    std::string content;  // kReplace
    char32_t strip_char = 0;
    int strip_start = 0;
    int strip_stop = 0;
  };

  DecoderState NewState() const;
  void Push(std::string_view token, DecoderState* state, std::string* out) const;
  void Finish(DecoderState* state, std::string* out) const;

 private:
  void PushToken(size_t stage, std::string_view token, DecoderState* state, std::string* out) const;
  void PushText(size_t stage, std::string_view text, DecoderState* state, std::string* out) const;
  void FinishStage(size_t stage, DecoderState* state, std::string* out) const;
  // Emits the byte group a ByteFallback stage has collected.
  void FlushBytes(size_t stage, DecoderState* state, std::string* out) const;

  std::vector<Stage> stages_;
  bool join_with_space_ = false;
};

// Everything a loaded tokenizer consists of.
struct Pipeline {
  std::unique_ptr<Normalizer> normalizer;  // null: none
  PreTokenizerChain pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;  // null: none
  DecoderPipeline decoder;

  std::vector<AddedToken> added_tokens;  // the matchers point into it: never resized after use
  std::unique_ptr<AddedTokenMatcher> raw_matcher;         // tokens with normalized == false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher;  // tokens with normalized == true
  absl::flat_hash_map<std::string, int32_t> added_token_ids;

  std::vector<std::string> id_to_token;
  std::vector<bool> special;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  bool add_bos = false;  // add_special_tokens also prepends bos_id
  bool add_eos = false;  // add_special_tokens also appends eos_id
};

}  // namespace mlaserve::tokenizer_internal

#endif  // MLASERVE_ENGINE_TOKENIZER_COMPONENTS_H_
