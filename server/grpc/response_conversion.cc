#include "server/grpc/response_conversion.h"

#include <string>

#include "server/common/version.h"

namespace mlaserve {

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
    case FinishReason::kNone:
    case FinishReason::kDeadline:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

bool FillChunk(const StreamUpdate& update, v1::Chunk* chunk) {
  if (update.token_ids.empty() && update.text.empty()) return false;
  for (int32_t id : update.token_ids) chunk->add_token_ids(static_cast<uint32_t>(id));
  chunk->set_text(update.text);
  for (const TokenChoice& choice : update.logprobs) {
    v1::TokenLogprob* lp = chunk->add_logprobs();
    lp->set_token_id(static_cast<uint32_t>(choice.token));
    lp->set_logprob(choice.logprob);
    for (const auto& [id, logprob] : choice.top) {
      v1::TopLogprob* top = lp->add_top();
      top->set_token_id(static_cast<uint32_t>(id));
      top->set_logprob(logprob);
    }
  }
  return true;
}

void FillComplete(const Completion& c, v1::Complete* complete) {
  complete->set_finish_reason(ToProtoFinishReason(c.finish_reason));
  complete->set_matched_stop(c.matched_stop);
  complete->set_prompt_tokens(static_cast<uint32_t>(c.prompt_tokens));
  complete->set_completion_tokens(static_cast<uint32_t>(c.completion_tokens));
  complete->set_cached_tokens(static_cast<uint32_t>(c.cached_tokens));
  complete->set_queue_seconds(c.queue_seconds);
  complete->set_time_to_first_token_seconds(c.time_to_first_token_seconds);
  complete->set_e2e_seconds(c.e2e_seconds);
}

void FillModelInfo(const ServingEngine& engine, v1::GetModelInfoResponse* response) {
  const EngineInfo& info = engine.info();
  const ModelConfig& config = info.model_config;
  response->set_model_name(engine.description().model_name);
  response->set_architecture(config.model_type == "deepseek_v3" ? "DeepseekV3ForCausalLM"
                                                                : "DeepseekV2ForCausalLM");
  response->set_vocab_size(static_cast<uint32_t>(config.vocab_size));
  response->set_max_context_length(static_cast<uint32_t>(info.max_context_tokens));
  for (int32_t id : info.eos_token_ids) response->add_eos_token_ids(static_cast<uint32_t>(id));
  if (config.bos_token_id >= 0) {
    response->set_bos_token_id(static_cast<uint32_t>(config.bos_token_id));
  }
  response->set_num_layers(static_cast<uint32_t>(config.num_hidden_layers));
  response->set_hidden_size(static_cast<uint32_t>(config.hidden_size));
  response->set_kv_lora_rank(static_cast<uint32_t>(config.kv_lora_rank));
  response->set_num_routed_experts(static_cast<uint32_t>(config.n_routed_experts));
  response->set_num_experts_per_tok(static_cast<uint32_t>(config.num_experts_per_tok));
  response->set_dtype(config.torch_dtype.empty() ? std::string("float32") : config.torch_dtype);
}

void FillServerInfo(const ServingEngine& engine, absl::Time started, bool draining,
                    v1::GetServerInfoResponse* response) {
  const EngineStats stats = engine.stats();
  const EngineInfo& info = engine.info();
  response->set_version(Version());
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started));
  const ServingDescription& description = engine.description();
  response->set_backend(description.backend_name);
  response->set_activation_dtype(description.activation_dtype);
  response->set_kv_cache_dtype(description.kv_cache_dtype);
  response->set_num_running(static_cast<uint32_t>(stats.num_running));
  response->set_num_waiting(static_cast<uint32_t>(stats.num_waiting));
  response->set_kv_blocks_total(static_cast<uint32_t>(stats.kv_blocks_total));
  response->set_kv_blocks_free(static_cast<uint32_t>(stats.kv_blocks_free));
  response->set_kv_block_size(static_cast<uint32_t>(stats.kv_block_size));
  response->set_kv_cache_usage(stats.kv_cache_usage);
  response->set_max_num_seqs(static_cast<uint32_t>(stats.max_num_seqs));
  response->set_max_num_batched_tokens(static_cast<uint32_t>(stats.max_num_batched_tokens));
  for (int32_t size : description.graph_batch_sizes) {
    response->add_graph_batch_sizes(static_cast<uint32_t>(size));
  }
  response->set_graph_memory_bytes(info.graph_bytes);
  response->set_weight_bytes(info.weight_bytes);
  response->set_kv_cache_bytes(info.kv_cache_bytes);
  response->set_workspace_bytes(info.workspace_bytes);
  response->set_draining(draining || stats.draining);
  response->set_steps_total(stats.steps_total);
  // Before the first step there is no age to report; 0 keeps stall alerts quiet.
  const absl::Duration age = stats.last_step_time == absl::InfinitePast()
                                 ? absl::ZeroDuration()
                                 : engine.Now() - stats.last_step_time;
  response->set_last_step_age_seconds(absl::ToDoubleSeconds(age));
  response->set_prefix_cache_hit_tokens(stats.prefix_cache_hit_tokens);
  response->set_prefix_cache_query_tokens(stats.prefix_cache_query_tokens);
}

}  // namespace mlaserve
