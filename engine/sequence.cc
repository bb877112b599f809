#include "engine/sequence.h"

namespace mlaserve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kDeadline:
      return "deadline";
  }
  return "unknown";
}

}  // namespace mlaserve
