#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/components.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/read_file.h"

namespace mlaserve {
namespace {

using tokenizer_internal::AddedToken;
using tokenizer_internal::AddedTokenMatcher;
using tokenizer_internal::Pipeline;

absl::Status ParseAddedTokens(const nlohmann::json& json, Pipeline* p) {
  if (json.is_null()) return absl::OkStatus();
  if (!json.is_array()) return absl::InvalidArgumentError("added_tokens must be a list");
  for (const auto& entry : json) {
    AddedToken token;
    const std::string where = absl::StrCat("added_tokens[", p->added_tokens.size(), "]");
    const std::optional<int32_t> id = entry.is_object() && entry.contains("id")
                                          ? tokenizer_internal::JsonTokenId(entry["id"])
                                          : std::nullopt;
    if (!id.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".id must be an id in [0, ", tokenizer_internal::kMaxTokenId, "]"));
    }
    if (auto s = tokenizer_internal::JsonString(entry, "content", where, &token.content); !s.ok()) {
      return s;
    }
    const std::pair<const char*, bool*> flags[] = {{"special", &token.special},
                                                   {"lstrip", &token.lstrip},
                                                   {"rstrip", &token.rstrip},
                                                   {"normalized", &token.normalized},
                                                   {"single_word", &token.single_word}};
    for (const auto& [key, out] : flags) {
      if (auto s = tokenizer_internal::JsonBool(entry, key, false, where, out); !s.ok()) return s;
    }
    // As in the reference, a token already in the model's vocabulary keeps the model's id.
    const auto& vocab = p->model->vocab();
    const auto in_vocab = vocab.find(token.content);
    token.id = in_vocab != vocab.end() ? in_vocab->second : *id;
    p->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

void BuildIdTables(Pipeline* p) {
  int32_t max_id = -1;
  for (const auto& [token, id] : p->model->vocab()) max_id = std::max(max_id, id);
  for (const AddedToken& token : p->added_tokens) max_id = std::max(max_id, token.id);
  p->id_to_token.assign(max_id + 1, std::string());
  p->special.assign(max_id + 1, false);
  for (const auto& [token, id] : p->model->vocab()) p->id_to_token[id] = token;
  std::vector<const AddedToken*> raw, normalized;
  for (const AddedToken& token : p->added_tokens) {
    p->id_to_token[token.id] = token.content;
    p->special[token.id] = p->special[token.id] || token.special;
    p->added_token_ids.try_emplace(token.content, token.id);
    (token.normalized ? normalized : raw).push_back(&token);
  }
  p->raw_matcher = std::make_unique<AddedTokenMatcher>(raw, nullptr);
  p->normalized_matcher = std::make_unique<AddedTokenMatcher>(normalized, p->normalizer.get());
}

std::optional<int32_t> TokenId(const Pipeline& p, std::string_view token) {
  if (const auto it = p.added_token_ids.find(tokenizer_internal::AbslView(token));
      it != p.added_token_ids.end()) {
    return it->second;
  }
  const auto& vocab = p.model->vocab();
  if (const auto it = vocab.find(tokenizer_internal::AbslView(token)); it != vocab.end()) {
    return it->second;
  }
  return std::nullopt;
}

// tokenizer_config.json names special tokens as a string or as {"content": ...}.
std::optional<int32_t> ConfigToken(const nlohmann::json& config, const char* key,
                                   const Pipeline& p) {
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return TokenId(p, it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return TokenId(p, (*it)["content"].get<std::string>());
  }
  return std::nullopt;
}

void ApplyConfig(const nlohmann::json& config, Pipeline* p) {
  p->bos_id = ConfigToken(config, "bos_token", *p);
  p->eos_id = ConfigToken(config, "eos_token", *p);
  std::vector<int32_t> added_by_template;
  if (p->post_processor != nullptr) p->post_processor->Process(true, &added_by_template);
  auto wanted = [&](const char* key, const std::optional<int32_t>& id) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() && it->get<bool>() && id.has_value() &&
           std::find(added_by_template.begin(), added_by_template.end(), *id) ==
               added_by_template.end();
  };
  p->add_bos = wanted("add_bos_token", p->bos_id);
  p->add_eos = wanted("add_eos_token", p->eos_id);
}

absl::Status BuildPipeline(const nlohmann::json& json, Pipeline* p) {
  if (!json.is_object()) return absl::InvalidArgumentError("tokenizer.json must be an object");
  auto section = [&json](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    const auto it = json.find(key);
    return it == json.end() ? kNull : *it;
  };
  for (const char* key : {"truncation", "padding"}) {
    if (!section(key).is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is not supported (must be null)"));
    }
  }
  auto model = tokenizer_internal::BpeModel::Parse(section("model"));
  if (!model.ok()) return model.status();
  p->model = std::move(*model);
  auto normalizer = tokenizer_internal::ParseNormalizer(section("normalizer"));
  if (!normalizer.ok()) return normalizer.status();
  p->normalizer = std::move(*normalizer);
  auto pre_tokenizer =
      tokenizer_internal::ParsePreTokenizer(section("pre_tokenizer"), p->model->AcceptsRawBytes());
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  p->pre_tokenizer = std::move(*pre_tokenizer);
  auto post_processor = tokenizer_internal::ParsePostProcessor(section("post_processor"));
  if (!post_processor.ok()) return post_processor.status();
  p->post_processor = std::move(*post_processor);
  auto decoder = tokenizer_internal::DecoderPipeline::Parse(section("decoder"));
  if (!decoder.ok()) return decoder.status();
  p->decoder = std::move(*decoder);
  if (auto s = ParseAddedTokens(section("added_tokens"), p); !s.ok()) return s;
  BuildIdTables(p);
  // Encode emits the post-processor's ids as they are, so each must name a token.
  std::vector<int32_t> template_ids;
  if (p->post_processor != nullptr) p->post_processor->Process(true, &template_ids);
  for (const int32_t id : template_ids) {
    if (id >= static_cast<int64_t>(p->id_to_token.size()) || p->id_to_token[id].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("post_processor: special token id ", id, " is not in the vocabulary"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<const Pipeline> pipeline) : pipeline_(std::move(pipeline)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::filesystem::path file(path);
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) file /= "tokenizer.json";
  auto text = ReadWholeFile(file.string());
  if (!text.ok()) return text.status();
  // tokenizer_config.json is optional: absent, it contributes nothing.
  auto config = ReadWholeFile((file.parent_path() / "tokenizer_config.json").string());
  if (!config.ok() && !absl::IsNotFound(config.status())) return config.status();
  const std::string config_text = config.ok() ? *std::move(config) : std::string();

  auto tokenizer = Parse(*text, config_text);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(file.string(), ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Parse(std::string_view tokenizer_json,
                                                            std::string_view config_json) {
  auto pipeline = std::make_unique<Pipeline>();
  try {
    const nlohmann::json json = nlohmann::json::parse(tokenizer_json);
    if (auto s = BuildPipeline(json, pipeline.get()); !s.ok()) return s;
    if (!config_json.empty()) {
      const nlohmann::json config = nlohmann::json::parse(config_json);
      if (config.is_object()) ApplyConfig(config, pipeline.get());
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(pipeline)));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  const Pipeline& p = *pipeline_;
  std::string sanitized;
  if (!tokenizer_internal::IsValidUtf8(text)) {
    tokenizer_internal::AppendUtf8Lossy(text, /*final=*/true, &sanitized);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  std::vector<AddedTokenMatcher::Segment> raw_segments, segments;
  p.raw_matcher->Split(text, &raw_segments);
  for (const auto& raw : raw_segments) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string normalized;
    std::string_view segment_text = raw.text;
    if (p.normalizer != nullptr) {
      normalized = p.normalizer->Normalize(raw.text);
      segment_text = normalized;
    }
    segments.clear();
    p.normalized_matcher->Split(segment_text, &segments);
    for (const auto& segment : segments) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
      } else {
        EncodeSegment(segment.text, &ids);
      }
    }
  }
  if (p.post_processor != nullptr) p.post_processor->Process(add_special_tokens, &ids);
  if (add_special_tokens && p.add_bos) ids.insert(ids.begin(), *p.bos_id);
  if (add_special_tokens && p.add_eos) ids.push_back(*p.eos_id);
  return ids;
}

void Tokenizer::EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  const Pipeline& p = *pipeline_;
  tokenizer_internal::Pieces pieces;
  pieces.views.push_back(text);
  for (const auto& step : p.pre_tokenizer.steps) step->PreTokenize(&pieces);
  for (const std::string_view piece : pieces.views) {
    p.model->Tokenize(piece, p.pre_tokenizer.defers_byte_mapping, ids);
  }
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  DecodeStream stream = NewDecodeStream(skip_special_tokens);
  for (const int32_t id : ids) stream.Add(id, &out);
  stream.Finish(&out);
  return out;
}

Tokenizer::DecodeStream Tokenizer::NewDecodeStream(bool skip_special_tokens) const {
  return DecodeStream(this, skip_special_tokens);
}

Tokenizer::DecodeStream::DecodeStream(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_tokens_(skip_special_tokens),
      state_(std::make_unique<tokenizer_internal::DecoderState>(
          tokenizer->pipeline_->decoder.NewState())) {}
Tokenizer::DecodeStream::DecodeStream(DecodeStream&&) noexcept = default;
Tokenizer::DecodeStream& Tokenizer::DecodeStream::operator=(DecodeStream&&) noexcept = default;
Tokenizer::DecodeStream::~DecodeStream() = default;

void Tokenizer::DecodeStream::Add(int32_t id, std::string* out) {
  const Pipeline& p = *tokenizer_->pipeline_;
  if (id < 0 || id >= static_cast<int64_t>(p.id_to_token.size())) return;
  if (p.id_to_token[id].empty()) return;
  if (skip_special_tokens_ && p.special[id]) return;
  p.decoder.Push(p.id_to_token[id], state_.get(), out);
}

void Tokenizer::DecodeStream::Finish(std::string* out) {
  tokenizer_->pipeline_->decoder.Finish(state_.get(), out);
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(pipeline_->id_to_token.size());
}
std::optional<int32_t> Tokenizer::bos_id() const { return pipeline_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return pipeline_->eos_id; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return TokenId(*pipeline_, token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Pipeline& p = *pipeline_;
  if (id < 0 || id >= static_cast<int64_t>(p.id_to_token.size())) return std::string();
  return p.id_to_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  const Pipeline& p = *pipeline_;
  return id >= 0 && id < static_cast<int64_t>(p.special.size()) && p.special[id];
}

}  // namespace mlaserve
