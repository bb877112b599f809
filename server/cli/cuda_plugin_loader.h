// Finds and loads mlaserve_cuda_plugin.so (kernels/cuda/plugin/): beside the executable, or at
// $MLASERVE_CUDA_PLUGIN. Loaded once, on first use, and kept for the life of the process.
// Thread-safe.
#ifndef MLASERVE_SERVER_CLI_CUDA_PLUGIN_LOADER_H_
#define MLASERVE_SERVER_CLI_CUDA_PLUGIN_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"

namespace mlaserve {

// Usable CUDA devices through the plugin; 0 when the plugin, the CUDA runtime or a device is
// missing (`why`, when given, says which).
int PluginCudaDeviceCount(std::string* why = nullptr);

// The real CUDA backend on `device`; an error naming what is missing otherwise.
absl::StatusOr<std::unique_ptr<Backend>> NewPluginCudaBackend(int device, bool batch_invariant,
                                                              DType activation_dtype);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_CLI_CUDA_PLUGIN_LOADER_H_
