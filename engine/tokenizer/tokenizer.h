// Tokenizer: loads a Hugging Face tokenizer.json whose model is BPE (byte-level BPE as in
// DeepSeek-V2/V3, Llama 3, Qwen2 and GPT-2, or BPE with byte fallback) and reproduces the
// Hugging Face `tokenizers` library's encode and decode exactly.
//
// Supported components: normalizers NFC, Replace, Prepend, Sequence; pre-tokenizers Split
// (Oniguruma-style regex or literal, every split behaviour, invert), ByteLevel, Digits,
// Sequence; the BPE model with ranked merges in either serialization, ignore_merges,
// byte_fallback, unk_token, fuse_unk and subword affixes; added tokens with their lstrip,
// rstrip, normalized, single_word and special flags; post-processors TemplateProcessing,
// BertProcessing, RobertaProcessing, ByteLevel, Sequence; decoders ByteLevel, ByteFallback,
// Fuse, Strip, Replace, Sequence. Anything else makes Load() fail with an error naming it.
//
// Thread-safety: a loaded Tokenizer is immutable; every const method may be called from any
// number of threads at once. A DecodeStream belongs to one thread at a time.

#ifndef MLASERVE_ENGINE_TOKENIZER_TOKENIZER_H_
#define MLASERVE_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace mlaserve {
namespace tokenizer_internal {
struct DecoderState;
struct Pipeline;
}  // namespace tokenizer_internal

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one. A tokenizer_config.json beside
  // it, when present, supplies bos_token / eos_token and add_bos_token / add_eos_token.
  // Errors: NotFound (no file), InvalidArgument (malformed JSON or an unsupported component,
  // named in the message).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // Builds a tokenizer from the text of a tokenizer.json and of a tokenizer_config.json
  // (empty when there is none); Load() reads the files and calls it. Any malformed or
  // unsupported input is an InvalidArgument error; this never throws.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Parse(std::string_view tokenizer_json,
                                                          std::string_view config_json);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text`. Invalid UTF-8 in `text` is first replaced by U+FFFD per maximal
  // invalid subpart. With `add_special_tokens` the post-processor's template is applied, and
  // bos / eos are added when tokenizer_config.json asks for them (add_bos_token,
  // add_eos_token) and the post-processor does not already add them.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`; ids without a token are skipped. With `skip_special_tokens` the added
  // tokens marked special are left out.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // Decode() of a sequence that grows one id at a time. After Add() of ids i0..in and
  // Finish(), the concatenated output equals Decode({i0..in}). Output is valid UTF-8 and is
  // released as soon as later ids cannot change it; a trailing incomplete UTF-8 sequence is
  // emitted by Finish() as U+FFFD. The Tokenizer must outlive the stream.
  class DecodeStream {
   public:
    DecodeStream(DecodeStream&&) noexcept;
    DecodeStream& operator=(DecodeStream&&) noexcept;
    ~DecodeStream();

    // Appends the text that `id` makes final to *out.
    void Add(int32_t id, std::string* out);
    // Appends everything still held back. Add() must not be called afterwards.
    void Finish(std::string* out);

   private:
    friend class Tokenizer;
    DecodeStream(const Tokenizer* tokenizer, bool skip_special_tokens);

    const Tokenizer* tokenizer_;
    bool skip_special_tokens_;
    std::unique_ptr<tokenizer_internal::DecoderState> state_;
  };
  DecodeStream NewDecodeStream(bool skip_special_tokens) const;

  // One more than the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id` as stored in tokenizer.json; empty when the id has none.
  std::string id_to_token(int32_t id) const;
  // True for added tokens marked special.
  bool is_special(int32_t id) const;

 private:
  explicit Tokenizer(std::unique_ptr<const tokenizer_internal::Pipeline> pipeline);
  // Encodes text that holds no added token.
  void EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<const tokenizer_internal::Pipeline> pipeline_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_TOKENIZER_TOKENIZER_H_
