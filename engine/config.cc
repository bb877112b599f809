#include "engine/config.h"

#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/util/read_file.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxShownValueChars = 80;
// The largest dimension or count (Fields::Size): the engine multiplies up to three of them and
// an element size, which then stays below 2^62. Real models are far smaller (DeepSeek-V3's
// largest is its 163,840 positions).
constexpr int64_t kMaxSize = int64_t{1} << 20;

// A JSON value as it appears in the file, cut short for error messages.
std::string Shown(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > kMaxShownValueChars) s = s.substr(0, kMaxShownValueChars) + "...";
  return s;
}

// Typed access to the members of one JSON object. Every error is InvalidArgument and starts
// with the quoted field name (prefixed for nested objects, e.g. "rope_scaling.factor").
// "Absent" means missing or null: HF configs write null for "not used".
class Fields {
 public:
  Fields(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  // nullptr when the key is missing or null.
  const Json* Get(absl::string_view key) const {
    auto it = obj_.find(std::string(key));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    const Json* v = Get(key);
    return absl::InvalidArgumentError(
        absl::StrCat("\"", prefix_, key, "\": ", what,
                     v == nullptr ? " (missing)" : absl::StrCat(", got ", Shown(*v))));
  }

  // An integer >= min. Absent: `fallback`, or an error when there is none.
  absl::Status Int(absl::string_view key, int64_t min, std::optional<int64_t> fallback,
                   int64_t* out) const {
    const std::string want = min == 1   ? "must be a positive integer"
                             : min == 0 ? "must be a non-negative integer"
                                        : absl::StrCat("must be an integer >= ", min);
    const Json* v = Get(key);
    if (v == nullptr) {
      if (!fallback.has_value()) return Error(key, want);
      *out = *fallback;
      return absl::OkStatus();
    }
    int64_t value = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Error(key, want);
      value = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      value = v->get<int64_t>();
    } else {
      return Error(key, want);
    }
    if (value < min) return Error(key, want);
    *out = value;
    return absl::OkStatus();
  }

  // A dimension or count: Int() that is also at most kMaxSize.
  absl::Status Size(absl::string_view key, int64_t min, std::optional<int64_t> fallback,
                    int64_t* out) const {
    if (absl::Status s = Int(key, min, fallback, out); !s.ok()) return s;
    if (*out > kMaxSize) return Error(key, absl::StrCat("must be at most ", kMaxSize));
    return absl::OkStatus();
  }

  // A finite number (integers accepted), > 0 when `positive`.
  absl::Status Number(absl::string_view key, bool positive, std::optional<double> fallback,
                      double* out) const {
    const absl::string_view want = positive ? "must be a positive number" : "must be a number";
    const Json* v = Get(key);
    if (v == nullptr) {
      if (!fallback.has_value()) return Error(key, want);
      *out = *fallback;
      return absl::OkStatus();
    }
    if (!v->is_number()) return Error(key, want);
    const double d = v->get<double>();
    if (!std::isfinite(d) || (positive && !(d > 0))) return Error(key, want);
    *out = d;
    return absl::OkStatus();
  }

  absl::Status Bool(absl::string_view key, bool fallback, bool* out) const {
    const Json* v = Get(key);
    if (v == nullptr) {
      *out = fallback;
      return absl::OkStatus();
    }
    if (!v->is_boolean()) return Error(key, "must be true or false");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // Absent: `fallback`, or an error when there is none.
  absl::Status String(absl::string_view key, std::optional<std::string> fallback,
                      std::string* out) const {
    const Json* v = Get(key);
    if (v == nullptr) {
      if (!fallback.has_value()) return Error(key, "must be a string");
      *out = *fallback;
      return absl::OkStatus();
    }
    if (!v->is_string()) return Error(key, "must be a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

 private:
  const Json& obj_;
  std::string prefix_;
};

#define MLASERVE_RETURN_IF_ERROR_(expr) \
  do {                                  \
    absl::Status _st = (expr);          \
    if (!_st.ok()) return _st;          \
  } while (0)

// rope_scaling (DeepSeek's HF files) or rope_parameters (what transformers v5 writes; it also
// carries rope_theta). `name` is the key the object came from.
absl::Status ParseRopeScaling(const Json& obj, absl::string_view name, ModelConfig* c) {
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": must be an object or null, got ", Shown(obj)));
  }
  const Fields f(obj, absl::StrCat(name, "."));
  // HF accepts either key; newer files write both.
  std::string type, rope_type;
  MLASERVE_RETURN_IF_ERROR_(f.String("type", "", &type));
  MLASERVE_RETURN_IF_ERROR_(f.String("rope_type", "", &rope_type));
  if (!type.empty() && !rope_type.empty() && type != rope_type) {
    return f.Error("type", absl::StrCat("disagrees with \"rope_type\": \"", rope_type, "\""));
  }
  const absl::string_view type_key = type.empty() && !rope_type.empty() ? "rope_type" : "type";
  if (type.empty()) type = rope_type;

  if (name == "rope_parameters") {
    MLASERVE_RETURN_IF_ERROR_(f.Number("rope_theta", true, c->rope_theta, &c->rope_theta));
    if (type == "default") return absl::OkStatus();
  }
  RopeScaling& r = c->rope_scaling;
  if (type == "linear") {
    r.type = RopeScalingType::kLinear;
    return f.Number("factor", true, std::nullopt, &r.factor);
  }
  if (type == "yarn") {
    // Defaults are those of DeepseekV2YarnRotaryEmbedding in DeepSeek's modeling code.
    r.type = RopeScalingType::kYarn;
    MLASERVE_RETURN_IF_ERROR_(f.Number("factor", true, std::nullopt, &r.factor));
    MLASERVE_RETURN_IF_ERROR_(
        f.Size("original_max_position_embeddings", 1, 4096, &r.original_max_position_embeddings));
    MLASERVE_RETURN_IF_ERROR_(f.Number("beta_fast", false, 32.0, &r.beta_fast));
    MLASERVE_RETURN_IF_ERROR_(f.Number("beta_slow", false, 1.0, &r.beta_slow));
    MLASERVE_RETURN_IF_ERROR_(f.Number("mscale", false, 1.0, &r.mscale));
    MLASERVE_RETURN_IF_ERROR_(f.Number("mscale_all_dim", false, 0.0, &r.mscale_all_dim));
    return absl::OkStatus();
  }
  return f.Error(type_key, name == "rope_parameters" ? "must be \"default\", \"linear\" or \"yarn\""
                                                     : "must be \"linear\" or \"yarn\"");
}

absl::Status ParseMoe(const Fields& f, ModelConfig* c) {
  const bool v3 = c->model_type == "deepseek_v3";
  MLASERVE_RETURN_IF_ERROR_(f.Size("n_routed_experts", 0, 0, &c->n_routed_experts));
  MLASERVE_RETURN_IF_ERROR_(f.Size("n_shared_experts", 0, 0, &c->n_shared_experts));
  MLASERVE_RETURN_IF_ERROR_(f.Int("first_k_dense_replace", 0, 0, &c->first_k_dense_replace));
  MLASERVE_RETURN_IF_ERROR_(f.Int("moe_layer_freq", 1, 1, &c->moe_layer_freq));
  MLASERVE_RETURN_IF_ERROR_(f.Int("n_group", 1, 1, &c->n_group));
  MLASERVE_RETURN_IF_ERROR_(f.Int("topk_group", 1, 1, &c->topk_group));
  MLASERVE_RETURN_IF_ERROR_(f.Bool("norm_topk_prob", false, &c->norm_topk_prob));
  MLASERVE_RETURN_IF_ERROR_(
      f.Number("routed_scaling_factor", true, 1.0, &c->routed_scaling_factor));

  // V3 files written by transformers' own DeepseekV3Config carry neither key: that class
  // always routes with sigmoid + noaux_tc, which is also the default of DeepSeek's V3 code.
  std::string method, scoring;
  MLASERVE_RETURN_IF_ERROR_(f.String("topk_method", v3 ? "noaux_tc" : "greedy", &method));
  MLASERVE_RETURN_IF_ERROR_(f.String("scoring_func", v3 ? "sigmoid" : "softmax", &scoring));
  if (method == "greedy") {
    c->topk_method = MoeTopkMethod::kGreedy;
  } else if (method == "group_limited_greedy") {
    c->topk_method = MoeTopkMethod::kGroupLimitedGreedy;
  } else if (method == "noaux_tc") {
    c->topk_method = MoeTopkMethod::kNoauxTc;
  } else {
    return f.Error("topk_method", "must be \"greedy\", \"group_limited_greedy\" or \"noaux_tc\"");
  }
  if (scoring == "softmax") {
    c->scoring_func = MoeScoring::kSoftmax;
  } else if (scoring == "sigmoid") {
    c->scoring_func = MoeScoring::kSigmoid;
  } else {
    return f.Error("scoring_func", "must be \"softmax\" or \"sigmoid\"");
  }

  if (c->n_routed_experts == 0) {  // dense model: the MoE fields are unused
    MLASERVE_RETURN_IF_ERROR_(f.Size("num_experts_per_tok", 0, 0, &c->num_experts_per_tok));
    MLASERVE_RETURN_IF_ERROR_(f.Size("moe_intermediate_size", 0, 0, &c->moe_intermediate_size));
    return absl::OkStatus();
  }
  MLASERVE_RETURN_IF_ERROR_(
      f.Size("num_experts_per_tok", 1, std::nullopt, &c->num_experts_per_tok));
  MLASERVE_RETURN_IF_ERROR_(
      f.Size("moe_intermediate_size", 1, std::nullopt, &c->moe_intermediate_size));
  if (c->num_experts_per_tok > c->n_routed_experts) {
    return f.Error("num_experts_per_tok",
                   absl::StrCat("must be <= n_routed_experts (", c->n_routed_experts, ")"));
  }
  if (c->n_routed_experts % c->n_group != 0) {
    return f.Error("n_group",
                   absl::StrCat("must divide n_routed_experts (", c->n_routed_experts, ")"));
  }
  if (c->topk_group > c->n_group) {
    return f.Error("topk_group", absl::StrCat("must be <= n_group (", c->n_group, ")"));
  }
  const int64_t per_group = c->n_routed_experts / c->n_group;
  if (c->topk_method != MoeTopkMethod::kGreedy) {
    // The kept groups must hold enough experts to pick top_k from.
    if (c->num_experts_per_tok > c->topk_group * per_group) {
      return f.Error("topk_group", absl::StrCat("keeps ", c->topk_group * per_group,
                                                " experts, fewer than num_experts_per_tok (",
                                                c->num_experts_per_tok, ")"));
    }
  }
  if (c->topk_method == MoeTopkMethod::kNoauxTc && c->n_group > 1 && per_group < 2) {
    // noaux_tc scores a group by the sum of its two best experts.
    return f.Error("n_group", "leaves fewer than 2 experts per group, which noaux_tc needs");
  }
  if (c->scoring_func == MoeScoring::kSigmoid &&
      c->topk_method == MoeTopkMethod::kGroupLimitedGreedy) {
    return f.Error("scoring_func", "\"sigmoid\" needs topk_method \"noaux_tc\" or \"greedy\"");
  }
  return absl::OkStatus();
}

absl::Status ParseTokens(const Fields& f, ModelConfig* c) {
  MLASERVE_RETURN_IF_ERROR_(f.Int("bos_token_id", 0, -1, &c->bos_token_id));
  c->eos_token_ids.clear();
  const Json* eos = f.Get("eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  constexpr absl::string_view kWant = "must be a non-negative integer or a list of them";
  if (!eos->is_array()) {
    int64_t id = 0;
    if (!f.Int("eos_token_id", 0, std::nullopt, &id).ok()) return f.Error("eos_token_id", kWant);
    c->eos_token_ids.push_back(id);
    return absl::OkStatus();
  }
  for (const Json& item : *eos) {
    const bool ok =
        item.is_number_unsigned() &&
        item.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (!ok) return f.Error("eos_token_id", kWant);
    c->eos_token_ids.push_back(static_cast<int64_t>(item.get<uint64_t>()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseObject(const Json& root) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError("config.json: the top level must be a JSON object");
  }
  const Fields f(root, "");
  ModelConfig c;
  MLASERVE_RETURN_IF_ERROR_(f.String("model_type", std::nullopt, &c.model_type));
  if (c.model_type != "deepseek_v2" && c.model_type != "deepseek_v3") {
    return f.Error("model_type", "must be \"deepseek_v2\" or \"deepseek_v3\"");
  }
  if (const Json* act = f.Get("hidden_act"); act != nullptr && *act != "silu") {
    return f.Error("hidden_act", "must be \"silu\"");
  }
  // num_key_value_heads is deliberately not read: MLA shares one latent across all heads.

  MLASERVE_RETURN_IF_ERROR_(f.Size("vocab_size", 1, std::nullopt, &c.vocab_size));
  MLASERVE_RETURN_IF_ERROR_(f.Size("hidden_size", 1, std::nullopt, &c.hidden_size));
  MLASERVE_RETURN_IF_ERROR_(f.Size("intermediate_size", 1, std::nullopt, &c.intermediate_size));
  MLASERVE_RETURN_IF_ERROR_(f.Size("num_hidden_layers", 1, std::nullopt, &c.num_hidden_layers));
  MLASERVE_RETURN_IF_ERROR_(f.Size("num_attention_heads", 1, std::nullopt, &c.num_attention_heads));
  MLASERVE_RETURN_IF_ERROR_(
      f.Size("max_position_embeddings", 1, std::nullopt, &c.max_position_embeddings));
  MLASERVE_RETURN_IF_ERROR_(f.Number("rms_norm_eps", true, 1e-6, &c.rms_norm_eps));

  // q_lora_rank must be written: null selects the plain q_proj (V2-Lite). A missing key would
  // make HF fall back to 1536, which is a guess we refuse to make.
  if (root.find("q_lora_rank") == root.end()) {
    return f.Error("q_lora_rank", "must be null or a positive integer");
  }
  if (f.Get("q_lora_rank") != nullptr &&
      !f.Size("q_lora_rank", 1, std::nullopt, &c.q_lora_rank).ok()) {
    return f.Error("q_lora_rank", "must be null or a positive integer");
  }
  MLASERVE_RETURN_IF_ERROR_(f.Size("kv_lora_rank", 1, std::nullopt, &c.kv_lora_rank));
  MLASERVE_RETURN_IF_ERROR_(f.Size("qk_nope_head_dim", 1, std::nullopt, &c.qk_nope_head_dim));
  MLASERVE_RETURN_IF_ERROR_(f.Size("qk_rope_head_dim", 1, std::nullopt, &c.qk_rope_head_dim));
  if (c.qk_rope_head_dim % 2 != 0) {
    return f.Error("qk_rope_head_dim", "must be even (rotary dimensions come in pairs)");
  }
  MLASERVE_RETURN_IF_ERROR_(f.Size("v_head_dim", 1, std::nullopt, &c.v_head_dim));
  MLASERVE_RETURN_IF_ERROR_(f.Number("rope_theta", true, 10000.0, &c.rope_theta));
  if (const Json* rs = f.Get("rope_scaling"); rs != nullptr) {
    MLASERVE_RETURN_IF_ERROR_(ParseRopeScaling(*rs, "rope_scaling", &c));
  } else if (const Json* rp = f.Get("rope_parameters"); rp != nullptr) {
    MLASERVE_RETURN_IF_ERROR_(ParseRopeScaling(*rp, "rope_parameters", &c));
  }

  MLASERVE_RETURN_IF_ERROR_(ParseMoe(f, &c));

  MLASERVE_RETURN_IF_ERROR_(f.Bool("tie_word_embeddings", false, &c.tie_word_embeddings));
  MLASERVE_RETURN_IF_ERROR_(ParseTokens(f, &c));
  // Newer transformers write "dtype" instead of "torch_dtype".
  if (f.Get("torch_dtype") != nullptr) {
    MLASERVE_RETURN_IF_ERROR_(f.String("torch_dtype", "", &c.torch_dtype));
  } else {
    MLASERVE_RETURN_IF_ERROR_(f.String("dtype", "", &c.torch_dtype));
  }
  return c;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text) {
  try {
    Json root;
    try {
      root = Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("config.json is not valid JSON: ", e.what()));
    }
    return ParseObject(root);
  } catch (const std::exception& e) {  // a nlohmann accessor we did not expect to throw
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", e.what()));
  }
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace mlaserve
