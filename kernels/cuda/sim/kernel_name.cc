#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <typeinfo>

#include "kernels/cuda/sim/sim.h"

namespace mlaserve::sim {
namespace {

std::string Demangle(const char* name) {
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && plain != nullptr ? plain : name;
  std::free(plain);
  return result;
}

}  // namespace

std::string KernelName(const void* kernel, const std::type_info& type) {
  // The symbol's own name where the executable exports it (the simulator's targets link with
  // -rdynamic); otherwise the kernel's signature and address.
  Dl_info info;
  if (dladdr(kernel, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == kernel) {
    return Demangle(info.dli_sname);
  }
  char address[32];
  std::snprintf(address, sizeof address, " at %p", kernel);
  return Demangle(type.name()) + address;
}

}  // namespace mlaserve::sim
