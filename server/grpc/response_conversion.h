// Engine results and state → v1 protos (Chunk, Complete, GetModelInfo, GetServerInfo).
//
// Thread-safety: pure functions.
#ifndef MLASERVE_SERVER_GRPC_RESPONSE_CONVERSION_H_
#define MLASERVE_SERVER_GRPC_RESPONSE_CONVERSION_H_

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "mlaserve/v1/inference.pb.h"
#include "server/common/serving_engine.h"

namespace mlaserve {

v1::FinishReason ToProtoFinishReason(FinishReason reason);

// The tokens, text and logprobs of `update` as one Chunk; false when it carries none.
bool FillChunk(const StreamUpdate& update, v1::Chunk* chunk);

void FillComplete(const Completion& completion, v1::Complete* complete);

void FillModelInfo(const ServingEngine& engine, v1::GetModelInfoResponse* response);

// `started` is when the server started, `draining` whether it stopped admitting.
void FillServerInfo(const ServingEngine& engine, absl::Time started, bool draining,
                    v1::GetServerInfoResponse* response);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_RESPONSE_CONVERSION_H_
