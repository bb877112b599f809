#include "server/common/serving_engine.h"

#include <utility>

namespace mlaserve {
namespace {

class EngineServingEngine final : public ServingEngine {
 public:
  EngineServingEngine(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer,
                      ServingDescription description)
      : engine_(std::move(engine)),
        tokenizer_(std::move(tokenizer)),
        description_(std::move(description)) {}

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) override {
    return engine_->Submit(std::move(request));
  }
  bool Abort(const RequestId& id) override { return engine_->Abort(id); }
  void Drain(absl::Duration timeout) override { engine_->Drain(timeout); }
  EngineStats stats() const override { return engine_->stats(); }
  const EngineInfo& info() const override { return engine_->info(); }
  absl::Time Now() const override { return engine_->Now(); }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  const ServingDescription& description() const override { return description_; }

 private:
  const std::unique_ptr<Engine> engine_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const ServingDescription description_;
};

}  // namespace

std::unique_ptr<ServingEngine> MakeServingEngine(std::unique_ptr<Engine> engine,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 ServingDescription description) {
  return std::make_unique<EngineServingEngine>(std::move(engine), std::move(tokenizer),
                                               std::move(description));
}

}  // namespace mlaserve
