#include "server/cli/cuda_plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

using DeviceCountFn = int (*)();
using NewBackendFn = Backend* (*)(int, bool, int, char*, size_t);

struct Plugin {
  DeviceCountFn device_count = nullptr;
  NewBackendFn new_backend = nullptr;
  std::string error;  // why it is not loaded
};

std::string PluginPath() {
  if (const char* env = std::getenv("MLASERVE_CUDA_PLUGIN")) return env;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "mlaserve_cuda_plugin.so";
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "mlaserve_cuda_plugin.so";
}

const Plugin& GetPlugin() {
  static const Plugin* plugin = [] {
    auto* p = new Plugin;
    const std::string path = PluginPath();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      p->error = absl::StrCat("cannot load ", path, ": ", why != nullptr ? why : "unknown");
      return p;
    }
    p->device_count = reinterpret_cast<DeviceCountFn>(dlsym(handle, "mlaserve_cuda_device_count"));
    p->new_backend = reinterpret_cast<NewBackendFn>(dlsym(handle, "mlaserve_new_cuda_backend"));
    if (p->device_count == nullptr || p->new_backend == nullptr) {
      p->error = absl::StrCat(path, " lacks the plugin's entry points");
      p->device_count = nullptr;
      p->new_backend = nullptr;
    }
    return p;
  }();
  return *plugin;
}

}  // namespace

int PluginCudaDeviceCount(std::string* why) {
  const Plugin& p = GetPlugin();
  if (p.device_count == nullptr) {
    if (why != nullptr) *why = p.error;
    return 0;
  }
  const int n = p.device_count();
  if (n == 0 && why != nullptr) *why = "the CUDA runtime finds no device (or no driver)";
  return n;
}

absl::StatusOr<std::unique_ptr<Backend>> NewPluginCudaBackend(int device, bool batch_invariant,
                                                              DType activation_dtype) {
  const Plugin& p = GetPlugin();
  if (p.new_backend == nullptr) return absl::FailedPreconditionError(p.error);
  char error[512] = {};
  Backend* backend = p.new_backend(device, batch_invariant, static_cast<int>(activation_dtype),
                                   error, sizeof error);
  if (backend == nullptr) return absl::InternalError(error);
  return std::unique_ptr<Backend>(backend);
}

}  // namespace mlaserve
