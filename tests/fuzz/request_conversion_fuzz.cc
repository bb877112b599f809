// Fuzzes ToEngineRequest and DetokenizeIds (server/common/request_conversion.h), the validators of
// client input. The first byte picks how the GenerateRequest is built: parsed from the rest
// of the input as wire bytes, or with every field set from it by FuzzedDataProvider (NaN and
// infinite floats, huge counts, huge repeated fields, model limits). Every input must come
// back as a Request or an error Status, and an accepted Request must obey the model limits.
#include <fuzzer/FuzzedDataProvider.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "server/common/request_conversion.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const mlaserve::Tokenizer& TinyTokenizer() {
  static const mlaserve::Tokenizer* const tokenizer = [] {
    auto loaded =
        mlaserve::Tokenizer::Load(MLASERVE_SOURCE_DIR "/tests/server/data/tiny_tokenizer");
    FUZZ_CHECK(loaded.ok());
    return loaded->release();
  }();
  return *tokenizer;
}

// Any float bit pattern, NaN and infinities included, half the time; else a plain value.
float AnyFloat(FuzzedDataProvider& in) {
  if (in.ConsumeBool()) return std::bit_cast<float>(in.ConsumeIntegral<uint32_t>());
  return in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
}

uint32_t AnyTokenId(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeIntegral<uint32_t>() : in.ConsumeIntegralInRange(0u, 300u);
}

void FillRequest(FuzzedDataProvider& in, mlaserve::v1::GenerateRequest* r) {
  r->set_request_id(in.ConsumeRandomLengthString(64));
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      r->set_text(in.ConsumeRandomLengthString(512));
      break;
    case 1: {
      const size_t n = in.ConsumeIntegralInRange<size_t>(0, 100000);
      auto* ids = r->mutable_token_ids()->mutable_ids();
      for (size_t i = 0; i < n && in.remaining_bytes() > 0; ++i) ids->Add(AnyTokenId(in));
      if (in.ConsumeBool()) r->mutable_token_ids()->mutable_ids()->Resize(static_cast<int>(n), 1);
      break;
    }
    default:
      break;
  }
  if (in.ConsumeBool()) {
    mlaserve::v1::SamplingParams& s = *r->mutable_sampling();
    if (in.ConsumeBool()) s.set_temperature(AnyFloat(in));
    if (in.ConsumeBool()) s.set_top_p(AnyFloat(in));
    if (in.ConsumeBool()) s.set_top_k(in.ConsumeIntegral<int32_t>());
    if (in.ConsumeBool()) s.set_min_p(AnyFloat(in));
    if (in.ConsumeBool()) s.set_seed(in.ConsumeIntegral<uint64_t>());
    if (in.ConsumeBool()) s.set_repetition_penalty(AnyFloat(in));
    if (in.ConsumeBool()) s.set_presence_penalty(AnyFloat(in));
    if (in.ConsumeBool()) s.set_frequency_penalty(AnyFloat(in));
  }
  if (in.ConsumeBool()) {
    mlaserve::v1::StoppingCriteria& t = *r->mutable_stopping();
    if (in.ConsumeBool()) t.set_max_tokens(in.ConsumeIntegral<uint32_t>());
    t.set_min_tokens(in.ConsumeBool() ? in.ConsumeIntegral<uint32_t>()
                                      : in.ConsumeIntegralInRange(0u, 64u));
    const int stops = in.ConsumeIntegralInRange(0, 8);
    for (int i = 0; i < stops; ++i) t.add_stop(in.ConsumeRandomLengthString(16));
    const int stop_ids = in.ConsumeIntegralInRange(0, 1000);
    for (int i = 0; i < stop_ids && in.remaining_bytes() > 0; ++i) {
      t.add_stop_token_ids(AnyTokenId(in));
    }
    t.set_ignore_eos(in.ConsumeBool());
    t.set_include_stop_str_in_output(in.ConsumeBool());
  }
  r->set_priority(in.ConsumeIntegral<int32_t>());
  r->set_top_logprobs(in.ConsumeBool() ? in.ConsumeIntegral<uint32_t>()
                                       : in.ConsumeIntegralInRange(0u, 25u));
  r->set_return_logprobs(in.ConsumeBool());
}

void CheckAccepted(const mlaserve::Request& r, const mlaserve::ModelLimits& limits) {
  FUZZ_CHECK(!r.prompt_token_ids.empty());
  FUZZ_CHECK(static_cast<int64_t>(r.prompt_token_ids.size()) < limits.max_context_tokens);
  for (const int32_t id : r.prompt_token_ids) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  for (const int32_t id : r.stopping.stop_token_ids) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  FUZZ_CHECK(std::isfinite(r.sampling.temperature) && r.sampling.temperature >= 0.0f);
  FUZZ_CHECK(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f);
  FUZZ_CHECK(r.sampling.min_p >= 0.0f && r.sampling.min_p <= 1.0f);
  FUZZ_CHECK(std::isfinite(r.sampling.repetition_penalty) && r.sampling.repetition_penalty > 0.0f);
  FUZZ_CHECK(r.sampling.top_k >= 0);
  FUZZ_CHECK(!r.stopping.max_tokens.has_value() || *r.stopping.max_tokens >= 1);
  FUZZ_CHECK(r.stopping.min_tokens >= 0);
  for (const std::string& stop : r.stopping.stop) FUZZ_CHECK(!stop.empty());
  FUZZ_CHECK(r.top_logprobs >= 0 &&
             r.top_logprobs <= static_cast<int32_t>(mlaserve::kMaxTopLogprobs));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // wire inputs with invalid UTF-8 strings log
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool wire = in.ConsumeBool();
  const bool with_tokenizer = in.ConsumeBool();
  mlaserve::ModelLimits limits;
  limits.vocab_size = in.ConsumeBool() ? in.ConsumeIntegral<int64_t>() : 256;
  limits.max_context_tokens = in.ConsumeBool() ? in.ConsumeIntegral<int32_t>() : 64;

  mlaserve::v1::GenerateRequest proto;
  if (wire) {
    const std::string bytes = in.ConsumeRemainingBytesAsString();
    if (!proto.ParseFromString(bytes)) return 0;
  } else {
    FillRequest(in, &proto);
  }
  const absl::StatusOr<mlaserve::Request> request =
      mlaserve::ToEngineRequest(proto, limits, with_tokenizer ? &TinyTokenizer() : nullptr);
  if (request.ok()) CheckAccepted(*request, limits);

  mlaserve::v1::DetokenizeRequest detokenize;
  *detokenize.mutable_ids() = proto.stopping().stop_token_ids();
  const absl::StatusOr<std::vector<int32_t>> ids =
      mlaserve::DetokenizeIds(detokenize, limits.vocab_size);
  if (ids.ok()) {
    for (const int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
  }
  return 0;
}
