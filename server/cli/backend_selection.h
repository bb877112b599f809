// Chooses and creates the compute backend for --backend=auto|cpu|cuda|cuda-sim|ref.
#ifndef MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_
#define MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace mlaserve {

// "cpu": the production CPU backend with `num_threads` (0 = all cores); "ref": the oracle
// (slow; for checking); "cuda": the CUDA backend on device 0, or a clear error when no CUDA
// device is usable (or the build has no CUDA backend); "cuda-sim": the same CUDA backend and
// kernels executed on the CPU by the SIMT simulator (slow; for tests and for checking the CUDA
// path without a GPU); "auto": cuda when usable, else cpu, logging which and why.
// `batch_invariant` (--deterministic) asks for kernels whose per-row results do not depend on
// the rest of the batch (Backend::batch_invariant); `activation_dtype` (--dtype) is kF32 or
// kBF16 (Backend::activation_dtype).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& kind, int num_threads,
                                                       bool batch_invariant,
                                                       DType activation_dtype = DType::kF32);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_BACKEND_SELECTION_H_
