// Chooses and creates the compute backend for --backend=auto|cpu|cuda|ref.
#ifndef MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_
#define MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace mlaserve {

// "cpu": the production CPU backend with `num_threads` (0 = all cores); "ref": the oracle
// (slow; for checking); "cuda": fails with a clear error when no CUDA device is usable (or the
// build has no CUDA backend); "auto": cuda when usable, else cpu, with a log line saying why.
// `batch_invariant` (--deterministic) asks for kernels whose per-row results do not depend on
// the rest of the batch (Backend::batch_invariant); `activation_dtype` (--dtype) is kF32 or
// kBF16 (Backend::activation_dtype).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& kind, int num_threads,
                                                       bool batch_invariant,
                                                       DType activation_dtype = DType::kF32);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_
