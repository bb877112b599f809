#include "server/serving_engine.h"

#include <utility>

namespace mlaserve {
namespace {

class EngineServingEngine final : public ServingEngine {
 public:
  EngineServingEngine(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer,
                      std::string backend_name, std::string model_name)
      : engine_(std::move(engine)),
        tokenizer_(std::move(tokenizer)),
        backend_name_(std::move(backend_name)),
        model_name_(std::move(model_name)) {}

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) override {
    return engine_->Submit(std::move(request));
  }
  bool Abort(const RequestId& id) override { return engine_->Abort(id); }
  void Drain(absl::Duration timeout) override { engine_->Drain(timeout); }
  EngineStats stats() const override { return engine_->stats(); }
  const EngineInfo& info() const override { return engine_->info(); }
  absl::Time Now() const override { return engine_->Now(); }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  std::string backend_name() const override { return backend_name_; }
  std::string model_name() const override { return model_name_; }

 private:
  const std::unique_ptr<Engine> engine_;
  const std::shared_ptr<const Tokenizer> tokenizer_;
  const std::string backend_name_;
  const std::string model_name_;
};

}  // namespace

std::unique_ptr<ServingEngine> MakeServingEngine(std::unique_ptr<Engine> engine,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 std::string backend_name, std::string model_name) {
  return std::make_unique<EngineServingEngine>(std::move(engine), std::move(tokenizer),
                                               std::move(backend_name), std::move(model_name));
}

}  // namespace mlaserve
