#include "engine/model_weights.h"

#include <charconv>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/status_macros.h"

namespace mlaserve {
namespace {

bool IsRotaryBuffer(std::string_view name) { return name.ends_with("rotary_emb.inv_freq"); }

// The layer index of "model.layers.<i>.…", or -1.
int64_t LayerIndexOf(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  int64_t index = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), index);
  if (ec != std::errc() || end == name.data() || *end != '.') return -1;
  return index;
}

absl::StatusOr<MlpWeights> LoadMlp(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                   int64_t inter) {
  MlpWeights mlp;
  ASSIGN_OR_RETURN(mlp.gate_up,
                   (loader.LoadConcat({prefix + "gate_proj.weight", prefix + "up_proj.weight"},
                                      {inter, hidden}, {2 * inter, hidden})));
  ASSIGN_OR_RETURN(mlp.down, (loader.Load(prefix + "down_proj.weight", {hidden, inter})));
  return mlp;
}

// W_UK^T per head, [H, kv_lora, nope], from kv_b = [H * (nope + v), kv_lora]: the decode path
// multiplies q_nope by it to move the query into latent space.
absl::StatusOr<TensorView> DeriveWukT(const ModelConfig& c, const TensorView& kv_b,
                                      Backend* backend, std::vector<DeviceBuffer>& buffers) {
  const int64_t h = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim,
                r = c.kv_lora_rank;
  const size_t elem = DTypeSize(kv_b.dtype());
  std::vector<char> src(static_cast<size_t>(kv_b.nbytes()));
  backend->CopyToHost(kv_b, src.data(), src.size());
  std::vector<char> dst(src.size() / static_cast<size_t>(nope + v) * static_cast<size_t>(nope));
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t d = 0; d < nope; ++d) {
      for (int64_t col = 0; col < r; ++col) {
        const size_t from = static_cast<size_t>((head * (nope + v) + d) * r + col) * elem;
        const size_t to = static_cast<size_t>((head * r + col) * nope + d) * elem;
        std::memcpy(dst.data() + to, src.data() + from, elem);
      }
    }
  }
  auto buffer = backend->Allocate(dst.size());
  if (!buffer.ok()) return buffer.status();
  TensorView view(buffer->data(), kv_b.dtype(), {h, r, nope});
  backend->CopyFromHost(dst.data(), dst.size(), view);
  buffers.push_back(std::move(*buffer));
  return view;
}

absl::Status LoadAttention(const ModelConfig& c, const std::string& p, WeightLoader& loader,
                           Backend* backend, LayerWeights& w, std::vector<DeviceBuffer>& buffers) {
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  const int64_t q_out = heads * c.qk_head_dim();
  if (c.q_lora_rank == 0) {
    ASSIGN_OR_RETURN(w.q_proj, (loader.Load(p + "q_proj.weight", {q_out, hidden})));
  } else {
    ASSIGN_OR_RETURN(w.q_a, (loader.Load(p + "q_a_proj.weight", {c.q_lora_rank, hidden})));
    ASSIGN_OR_RETURN(w.q_a_norm, (loader.LoadF32(p + "q_a_layernorm.weight", {c.q_lora_rank})));
    ASSIGN_OR_RETURN(w.q_b, (loader.Load(p + "q_b_proj.weight", {q_out, c.q_lora_rank})));
  }
  ASSIGN_OR_RETURN(w.kv_a,
                   (loader.Load(p + "kv_a_proj_with_mqa.weight", {c.kv_cache_dim(), hidden})));
  ASSIGN_OR_RETURN(w.kv_a_norm, (loader.LoadF32(p + "kv_a_layernorm.weight", {c.kv_lora_rank})));
  const int64_t nope_v = c.qk_nope_head_dim + c.v_head_dim;
  ASSIGN_OR_RETURN(w.kv_b, (loader.Load(p + "kv_b_proj.weight", {heads * nope_v, c.kv_lora_rank})));
  ASSIGN_OR_RETURN(w.w_uk_t, DeriveWukT(c, w.kv_b, backend, buffers));
  w.w_uv = TensorView(static_cast<char*>(w.kv_b.data()) +
                          c.qk_nope_head_dim * c.kv_lora_rank * DTypeSize(w.kv_b.dtype()),
                      w.kv_b.dtype(), {heads, c.v_head_dim, c.kv_lora_rank},
                      {nope_v * c.kv_lora_rank, c.kv_lora_rank, 1});
  ASSIGN_OR_RETURN(w.o_proj, (loader.Load(p + "o_proj.weight", {hidden, heads * c.v_head_dim})));
  return absl::OkStatus();
}

absl::Status LoadMoe(const ModelConfig& c, const std::string& p, WeightLoader& loader,
                     LayerWeights& w) {
  const int64_t hidden = c.hidden_size, e = c.n_routed_experts, inter = c.moe_intermediate_size;
  ASSIGN_OR_RETURN(w.router, (loader.LoadF32(p + "gate.weight", {e, hidden})));
  if (c.topk_method == MoeTopkMethod::kNoauxTc) {
    ASSIGN_OR_RETURN(w.router_bias, (loader.LoadF32(p + "gate.e_score_correction_bias", {e})));
  }
  std::vector<std::string> w13_names, w2_names;
  for (int64_t i = 0; i < e; ++i) {
    const std::string ep = absl::StrCat(p, "experts.", i, ".");
    w13_names.push_back(ep + "gate_proj.weight");
    w13_names.push_back(ep + "up_proj.weight");
    w2_names.push_back(ep + "down_proj.weight");
  }
  ASSIGN_OR_RETURN(w.experts_w13,
                   (loader.LoadConcat(w13_names, {inter, hidden}, {e, 2 * inter, hidden})));
  ASSIGN_OR_RETURN(w.experts_w2, (loader.LoadConcat(w2_names, {hidden, inter}, {e, hidden, inter})));
  if (c.n_shared_experts > 0) {
    ASSIGN_OR_RETURN(w.shared,
                     LoadMlp(loader, p + "shared_experts.", hidden, inter * c.n_shared_experts));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const ModelConfig& c, const Checkpoint& checkpoint,
                                              Backend* backend) {
  WeightLoader loader(&checkpoint, backend);
  ModelWeights m;
  const int64_t hidden = c.hidden_size;
  ASSIGN_OR_RETURN(m.embed, (loader.Load("model.embed_tokens.weight", {c.vocab_size, hidden})));
  std::vector<DeviceBuffer> derived;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeights w;
    ASSIGN_OR_RETURN(w.input_norm, (loader.LoadF32(p + "input_layernorm.weight", {hidden})));
    ASSIGN_OR_RETURN(w.post_attention_norm,
                     (loader.LoadF32(p + "post_attention_layernorm.weight", {hidden})));
    RETURN_IF_ERROR(LoadAttention(c, p + "self_attn.", loader, backend, w, derived));
    w.is_moe = c.IsMoeLayer(i);
    if (w.is_moe) {
      RETURN_IF_ERROR(LoadMoe(c, p + "mlp.", loader, w));
    } else {
      ASSIGN_OR_RETURN(w.dense, LoadMlp(loader, p + "mlp.", hidden, c.intermediate_size));
    }
    m.layers.push_back(w);
  }
  ASSIGN_OR_RETURN(m.final_norm, (loader.LoadF32("model.norm.weight", {hidden})));
  if (c.tie_word_embeddings) {
    m.lm_head = m.embed;
  } else {
    ASSIGN_OR_RETURN(m.lm_head, (loader.Load("lm_head.weight", {c.vocab_size, hidden})));
  }

  std::vector<std::string> unused;
  for (std::string& name : loader.Unused(&IsRotaryBuffer)) {
    if (LayerIndexOf(name) < c.num_hidden_layers) unused.push_back(std::move(name));
  }
  if (!unused.empty()) {
    if (unused.size() > 5) unused.resize(5);
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint has tensors the model does not use: ", absl::StrJoin(unused, ", ")));
  }
  m.weight_bytes = loader.weight_bytes();
  m.buffers = loader.ReleaseBuffers();
  for (DeviceBuffer& b : derived) {
    m.weight_bytes += b.bytes();
    m.buffers.push_back(std::move(b));
  }
  return m;
}

}  // namespace mlaserve
