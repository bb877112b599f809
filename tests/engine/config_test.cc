#include "engine/config.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/safetensors_writer_util.h"

namespace mlaserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string ConfigDir(const std::string& name) {
  const char* data = std::getenv("MLASERVE_TEST_DATA");
  return std::string(data != nullptr ? data : "tests/data") + "/configs/" + name;
}

ModelConfig LoadOrDie(const std::string& name) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(ConfigDir(name));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig{};
}

// The published config as JSON, for tests that break one field of it.
Json ConfigJson(const std::string& name) {
  const std::string path = ConfigDir(name) + "/config.json";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return Json::object();
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return Json::parse(text);
}

TEST(ConfigTest, DeepSeekV2Lite) {
  const ModelConfig c = LoadOrDie("deepseek_v2_lite");
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.num_hidden_layers, 27);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.q_lora_rank, 0);  // null: plain q_proj
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.kv_cache_dim(), 576);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.moe_layer_freq, 1);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.topk_method, MoeTopkMethod::kGreedy);
  EXPECT_EQ(c.scoring_func, MoeScoring::kSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(100001));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_TRUE(c.IsMoeLayer(26));
  EXPECT_FALSE(c.ScaleRoutedWeightsAlways());
}

TEST(ConfigTest, DeepSeekV2) {
  const ModelConfig c = LoadOrDie("deepseek_v2");
  EXPECT_EQ(c.model_type, "deepseek_v2");
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.num_hidden_layers, 60);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_EQ(c.n_routed_experts, 160);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.moe_layer_freq, 1);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 3);
  EXPECT_EQ(c.topk_method, MoeTopkMethod::kGroupLimitedGreedy);
  EXPECT_EQ(c.scoring_func, MoeScoring::kSoftmax);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 16.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(100001));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(59));
}

TEST(ConfigTest, DeepSeekV3) {
  const ModelConfig c = LoadOrDie("deepseek_v3");
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.kv_cache_dim(), 576);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.moe_layer_freq, 1);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.topk_method, MoeTopkMethod::kNoauxTc);
  EXPECT_EQ(c.scoring_func, MoeScoring::kSigmoid);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(1));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_TRUE(c.IsMoeLayer(3));
  EXPECT_TRUE(c.IsMoeLayer(60));
  EXPECT_TRUE(c.ScaleRoutedWeightsAlways());
}

TEST(ConfigTest, MissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  const absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path() + "/nope");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(dir.path() + "/nope/config.json"));
}

// A config.json that opens but cannot be read (a folder: read(2) fails with EISDIR).
TEST(ConfigTest, UnreadableFileIsFailedPreconditionNamingThePath) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.File("config.json").c_str(), 0755), 0);
  const absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr(dir.File("config.json") + ": read failed: "));
}

TEST(ConfigTest, LoadErrorsNameFileAndField) {
  TempDir dir;
  Json j = ConfigJson("deepseek_v3");
  j["kv_lora_rank"] = "512";
  ASSERT_TRUE(WriteBytes(dir.File("config.json"), j.dump()).ok());
  const absl::StatusOr<ModelConfig> c = LoadModelConfig(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(dir.File("config.json")));
  EXPECT_THAT(c.status().message(), HasSubstr("\"kv_lora_rank\": must be a positive integer"));
}

absl::StatusOr<ModelConfig> ParseJson(const Json& j) { return ParseModelConfig(j.dump()); }

TEST(ConfigTest, IgnoresKvHeadsAndUnknownKeys) {
  Json j = ConfigJson("deepseek_v2_lite");
  j["num_key_value_heads"] = "not even a number";
  j["some_future_key"] = {{"nested", {1, 2, 3}}};
  j.erase("hidden_act");  // optional
  const absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_attention_heads, 16);
}

TEST(ConfigTest, RoutingDefaultsFollowModelType) {
  Json v3 = ConfigJson("deepseek_v3");
  v3.erase("topk_method");
  v3.erase("scoring_func");
  absl::StatusOr<ModelConfig> c = ParseJson(v3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topk_method, MoeTopkMethod::kNoauxTc);
  EXPECT_EQ(c->scoring_func, MoeScoring::kSigmoid);

  Json v2 = ConfigJson("deepseek_v2_lite");
  v2.erase("topk_method");
  v2.erase("scoring_func");
  c = ParseJson(v2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topk_method, MoeTopkMethod::kGreedy);
  EXPECT_EQ(c->scoring_func, MoeScoring::kSoftmax);
}

TEST(ConfigTest, OptionalFieldsAndAlternateSpellings) {
  Json j = ConfigJson("deepseek_v2_lite");
  j["eos_token_id"] = {100001, 100015};
  j["bos_token_id"] = nullptr;
  j["n_shared_experts"] = nullptr;
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2}};
  absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(100001, 100015));
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->n_shared_experts, 0);
  EXPECT_EQ(c->torch_dtype, "float16");
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);

  j["rope_scaling"] = nullptr;
  c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  j.erase("rope_scaling");
  c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
}

TEST(ConfigTest, YarnDefaultsAreDeepSeeks) {
  Json j = ConfigJson("deepseek_v3");
  j["rope_scaling"] = {{"type", "yarn"}, {"rope_type", "yarn"}, {"factor", 4.0}};
  const absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale_all_dim, 0.0);
}

// transformers v5 writes rope_parameters (with rope_theta inside) instead of rope_scaling.
TEST(ConfigTest, RopeParameters) {
  Json j = ConfigJson("deepseek_v3");
  Json yarn = j["rope_scaling"];
  j.erase("rope_scaling");
  j.erase("rope_theta");
  yarn.erase("type");
  yarn["rope_type"] = "yarn";
  yarn["rope_theta"] = 50000.0;
  j["rope_parameters"] = yarn;
  absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_DOUBLE_EQ(c->rope_theta, 50000.0);

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000}};
  c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_DOUBLE_EQ(c->rope_theta, 20000.0);

  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2}};
  c = ParseJson(j);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("\"rope_parameters.rope_type\""));
}

TEST(ConfigTest, DenseModel) {
  Json j = ConfigJson("deepseek_v2_lite");
  j["n_routed_experts"] = nullptr;
  j["num_experts_per_tok"] = nullptr;
  j["n_shared_experts"] = nullptr;
  j.erase("moe_intermediate_size");
  const absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_routed_experts, 0);
  EXPECT_EQ(c->num_experts_per_tok, 0);
  for (int64_t layer = 0; layer < c->num_hidden_layers; ++layer) EXPECT_FALSE(c->IsMoeLayer(layer));
}

TEST(ConfigTest, MoeLayerFrequency) {
  Json j = ConfigJson("deepseek_v2_lite");
  j["moe_layer_freq"] = 2;
  j["first_k_dense_replace"] = 3;
  const absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_FALSE(c->IsMoeLayer(3));
  EXPECT_TRUE(c->IsMoeLayer(4));
  EXPECT_FALSE(c->IsMoeLayer(5));
}

TEST(ConfigTest, NotJson) {
  for (const char* text : {"", "{", "{\"model_type\": }", "[1, 2]", "42", "null"}) {
    const absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

// One broken field: which base config, the change (a JSON value, or "<erase>"), and the text
// the error must contain.
struct BadField {
  const char* base;
  const char* key;
  const char* value;  // JSON text, or nullptr to erase the key
  const char* expect;
};

class ConfigErrorTest : public ::testing::TestWithParam<BadField> {};

TEST_P(ConfigErrorTest, NamesTheField) {
  const BadField& p = GetParam();
  Json j = ConfigJson(p.base);
  // "a.b" patches a nested key.
  const std::string key = p.key;
  Json* target = &j;
  std::string leaf = key;
  if (const size_t dot = key.find('.'); dot != std::string::npos) {
    target = &j[key.substr(0, dot)];
    leaf = key.substr(dot + 1);
  }
  if (p.value == nullptr) {
    target->erase(leaf);
  } else {
    (*target)[leaf] = Json::parse(p.value);
  }
  const absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_FALSE(c.ok()) << key << " = " << (p.value ? p.value : "<erased>");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(p.expect));
}

constexpr const char* kLite = "deepseek_v2_lite";
constexpr const char* kV2 = "deepseek_v2";
constexpr const char* kV3 = "deepseek_v3";

INSTANTIATE_TEST_SUITE_P(
    Fields, ConfigErrorTest,
    ::testing::Values(
        BadField{kV3, "model_type", "\"llama\"", "\"model_type\": must be"},
        BadField{kV3, "model_type", nullptr, "\"model_type\""},
        BadField{kV3, "model_type", "3", "\"model_type\""},
        BadField{kV3, "hidden_act", "\"gelu\"", "\"hidden_act\": must be \"silu\""},
        BadField{kV3, "vocab_size", "0", "\"vocab_size\": must be a positive integer"},
        BadField{kV3, "vocab_size", "-5", "\"vocab_size\": must be a positive integer"},
        BadField{kV3, "vocab_size", "1.5", "\"vocab_size\": must be a positive integer"},
        BadField{kV3, "vocab_size", "18446744073709551615", "\"vocab_size\""},
        BadField{kV3, "vocab_size", nullptr, "\"vocab_size\": must be a positive integer"},
        // Sizes are bounded so that products of them cannot overflow int64: before,
        // qk_head_dim() of two dims near 2^62 overflowed.
        BadField{kV3, "vocab_size", "1048577", "\"vocab_size\": must be at most 1048576"},
        BadField{kV3, "qk_nope_head_dim", "4611686018427387904",
                 "\"qk_nope_head_dim\": must be at most"},
        BadField{kV3, "max_position_embeddings", "2000000", "\"max_position_embeddings\""},
        BadField{kV3, "rope_scaling.original_max_position_embeddings", "2000000",
                 "\"rope_scaling.original_max_position_embeddings\": must be at most"},
        BadField{kV3, "hidden_size", "true", "\"hidden_size\": must be a positive integer"},
        BadField{kV3, "intermediate_size", nullptr, "\"intermediate_size\""},
        BadField{kV3, "num_hidden_layers", "0", "\"num_hidden_layers\""},
        BadField{kV3, "num_attention_heads", "\"128\"", "\"num_attention_heads\""},
        BadField{kV3, "max_position_embeddings", nullptr, "\"max_position_embeddings\""},
        BadField{kV3, "rms_norm_eps", "0", "\"rms_norm_eps\": must be a positive number"},
        BadField{kV3, "rms_norm_eps", "\"1e-6\"", "\"rms_norm_eps\""},
        BadField{kV3, "q_lora_rank", nullptr, "\"q_lora_rank\": must be null or a positive"},
        BadField{kV3, "q_lora_rank", "0", "\"q_lora_rank\""},
        BadField{kV3, "q_lora_rank", "\"1536\"", "\"q_lora_rank\""},
        BadField{kV3, "kv_lora_rank", "\"512\"", "\"kv_lora_rank\": must be a positive integer"},
        BadField{kV3, "kv_lora_rank", "null", "\"kv_lora_rank\": must be a positive integer"},
        BadField{kV3, "qk_nope_head_dim", "0", "\"qk_nope_head_dim\""},
        BadField{kV3, "qk_rope_head_dim", "63", "\"qk_rope_head_dim\": must be even"},
        BadField{kV3, "qk_rope_head_dim", "[64]", "\"qk_rope_head_dim\""},
        BadField{kV3, "v_head_dim", nullptr, "\"v_head_dim\""},
        BadField{kV3, "rope_theta", "\"10000\"", "\"rope_theta\": must be a positive number"},
        BadField{kV3, "rope_theta", "-1", "\"rope_theta\""},
        BadField{kV3, "rope_scaling", "\"yarn\"", "\"rope_scaling\": must be an object"},
        BadField{kV3, "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}",
                 "\"rope_scaling.type\": must be \"linear\" or \"yarn\""},
        BadField{kV3, "rope_scaling", "{\"factor\": 2}", "\"rope_scaling.type\""},
        BadField{kV3, "rope_scaling", "{\"rope_type\": \"longrope\", \"factor\": 2}",
                 "\"rope_scaling.rope_type\""},
        BadField{kV3, "rope_scaling", "{\"type\": \"yarn\", \"rope_type\": \"linear\"}",
                 "\"rope_scaling.type\""},
        BadField{kV3, "rope_scaling.factor", nullptr, "\"rope_scaling.factor\""},
        BadField{kV3, "rope_scaling.factor", "0", "\"rope_scaling.factor\""},
        BadField{kV3, "rope_scaling.beta_fast", "\"32\"", "\"rope_scaling.beta_fast\""},
        BadField{kV3, "rope_scaling.beta_slow", "[]", "\"rope_scaling.beta_slow\""},
        BadField{kV3, "rope_scaling.mscale", "\"1\"", "\"rope_scaling.mscale\""},
        BadField{kV3, "rope_scaling.mscale_all_dim", "{}", "\"rope_scaling.mscale_all_dim\""},
        BadField{kV3, "rope_scaling.original_max_position_embeddings", "0",
                 "\"rope_scaling.original_max_position_embeddings\""},
        BadField{kLite, "rope_scaling", "{\"type\": \"linear\"}", "\"rope_scaling.factor\""},
        BadField{kV3, "n_routed_experts", "-1", "\"n_routed_experts\""},
        BadField{kV3, "n_routed_experts", "\"256\"", "\"n_routed_experts\""},
        BadField{kV3, "n_shared_experts", "-1", "\"n_shared_experts\""},
        BadField{kV3, "num_experts_per_tok", "257", "\"num_experts_per_tok\": must be <="},
        BadField{kV3, "num_experts_per_tok", "0", "\"num_experts_per_tok\""},
        BadField{kV3, "num_experts_per_tok", nullptr, "\"num_experts_per_tok\""},
        BadField{kV3, "moe_intermediate_size", nullptr, "\"moe_intermediate_size\""},
        BadField{kV3, "first_k_dense_replace", "-1", "\"first_k_dense_replace\""},
        BadField{kV3, "moe_layer_freq", "0", "\"moe_layer_freq\""},
        BadField{kV3, "n_group", "0", "\"n_group\""},
        BadField{kV3, "n_group", "7", "\"n_group\": must divide n_routed_experts"},
        BadField{kV3, "topk_group", "9", "\"topk_group\": must be <= n_group"},
        BadField{kV3, "topk_group", "0", "\"topk_group\""},
        // 256 experts in 256 groups of 1; keeping 4 groups leaves 4 < 8 experts.
        BadField{kV3, "n_group", "256", "\"topk_group\": keeps 4 experts"},
        BadField{kV3, "topk_method", "\"gready\"", "\"topk_method\": must be"},
        BadField{kV3, "topk_method", "1", "\"topk_method\""},
        BadField{kV3, "scoring_func", "\"relu\"", "\"scoring_func\": must be"},
        BadField{kV2, "scoring_func", "\"sigmoid\"", "\"scoring_func\": \"sigmoid\" needs"},
        BadField{kV3, "norm_topk_prob", "\"true\"", "\"norm_topk_prob\": must be true or false"},
        BadField{kV3, "routed_scaling_factor", "\"2.5\"", "\"routed_scaling_factor\""},
        BadField{kV3, "tie_word_embeddings", "0", "\"tie_word_embeddings\""},
        BadField{kV3, "bos_token_id", "\"<s>\"", "\"bos_token_id\""},
        BadField{kV3, "eos_token_id", "-1", "\"eos_token_id\""},
        BadField{kV3, "eos_token_id", "[1, \"x\"]", "\"eos_token_id\""},
        BadField{kV3, "eos_token_id", "{}", "\"eos_token_id\""},
        BadField{kV3, "torch_dtype", "5", "\"torch_dtype\""}));

// noaux_tc scores a group by its two best experts, so each group needs at least two.
TEST(ConfigTest, NoauxTcNeedsTwoExpertsPerGroup) {
  Json j = ConfigJson("deepseek_v3");
  j["n_group"] = 256;
  j["topk_group"] = 8;
  absl::StatusOr<ModelConfig> c = ParseJson(j);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("\"n_group\""));
  EXPECT_THAT(c.status().message(), HasSubstr("noaux_tc"));

  j["n_group"] = 1;  // one group: the group step is a no-op
  j["topk_group"] = 1;
  c = ParseJson(j);
  EXPECT_TRUE(c.ok()) << c.status();

  j["topk_method"] = "greedy";  // sigmoid is fine with plain greedy routing
  c = ParseJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topk_method, MoeTopkMethod::kGreedy);
  EXPECT_EQ(c->scoring_func, MoeScoring::kSigmoid);
}

}  // namespace
}  // namespace mlaserve
