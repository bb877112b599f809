#include "server/cli/backend_selection.h"

#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_bf16_multiply.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/ref/ref_backend.h"
#include "server/cli/cuda_plugin_loader.h"
#include "server/common/log.h"
#ifdef MLASERVE_HAVE_CUDA_SIM
#include "kernels/cuda/cuda_backend_factory.h"
#endif

namespace mlaserve {
namespace {

// The kernel's transparent huge page mode ("always", "madvise" or "never"): the CPU backend's
// weights need "always" or "madvise" to be mapped with 2 MiB pages (docs/deployment.md).
std::string TransparentHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unknown";
  return line.substr(open + 1, close - open - 1);
}

// A change of the decode prefetch by the online tuner, in the log: an operator sees the host's
// bandwidth change state and what the kernels made of it.
void LogStreamTuningSwitch(const StreamTuningSwitch& change) {
  LogEvent("cpu_decode_prefetch_switch", {{"from", StreamTuningName(change.from)},
                                          {"to", StreamTuningName(change.to)},
                                          {"median_ratio", change.median_ratio},
                                          {"online_calls", change.online_calls},
                                          {"switches", change.switches}});
}

// The facts and run-time choices that decide CPU speed on this host, in the start-up log.
std::unique_ptr<Backend> NewLoggedCpuBackend(int num_threads, bool batch_invariant,
                                             DType activation_dtype) {
  const CpuThreadBudget budget = DetectCpuThreadBudget();
  auto backend = std::make_unique<CpuBackend>(num_threads > 0 ? num_threads : budget.threads,
                                              batch_invariant, activation_dtype);
  const std::string threads_source = num_threads > 0 ? "--threads" : budget.source;
  const NumaPlacement& numa = backend->numa_placement();
  const int numa_refused = backend->numa_refused_errno();
  const CpuInfo& cpu = GetCpuInfo();
  const StreamTuningChoice& tuning = TuneStreaming(backend->context());
  SetStreamTuningSwitchListener(&LogStreamTuningSwitch);
  LogEvent("cpu_backend", {{"cpu", cpu.model},
                           {"vendor", cpu.vendor},
                           {"isa", std::string(CpuIsaName(backend->isa()))},
                           {"threads", int64_t{backend->num_threads()}},
                           {"threads_source", threads_source},
                           {"affinity_cpus", int64_t{budget.topology.affinity_cpus}},
                           {"affinity_cores", int64_t{budget.topology.affinity_cores}},
                           {"performance_cpus", int64_t{budget.topology.performance_cpus}},
                           {"performance_cores", int64_t{budget.topology.performance_cores}},
                           {"cgroup_cpu_limit", budget.cgroup.cpus},
                           {"cgroup_cpu_limit_file", budget.cgroup.file},
                           {"l2_bytes", cpu.l2_bytes},
                           {"l3_bytes", cpu.l3_bytes},
                           {"l3_instances", int64_t{cpu.l3_instances}},
                           {"amx", cpu.amx_bf16},
                           {"decode_tiles", DecodeTilesName(backend->decode_tiles())},
                           {"decode_tiles_source", backend->decode_tiles().source},
                           {"decode_prefetch", StreamTuningName(tuning.tuning)},
                           {"decode_prefetch_source", tuning.source},
                           {"probe_gbps", tuning.probe_gbps},
                           {"probe_gbps_by_choice", tuning.probe_table},
                           {"transparent_hugepages", TransparentHugePages()},
                           {"numa_nodes", int64_t(numa.nodes.size())},
                           {"memory_policy", std::string(numa.interleave ? "interleave" : "local")},
                           {"memory_policy_source", numa.source},
                           {"memory_policy_refused",
                            std::string(numa_refused == 0 ? "" : std::strerror(numa_refused))}});
  if (activation_dtype == DType::kBF16) {
    // The multiply of bf16 activations: remembered from the backend's construction.
    const Bf16MultiplyChoice multiply = SelectIsaForActivations(activation_dtype);
    LogEvent("cpu_bf16_multiply",
             {{"isa", std::string(CpuIsaName(multiply.isa))},
              {"source", multiply.source},
              {"probe_gflops_dot", multiply.dot_gflops},
              {"probe_gflops_fma", multiply.fma_gflops}});
  }
  return backend;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& kind, int num_threads,
                                                       bool batch_invariant,
                                                       DType activation_dtype) {
  if (kind == "cpu") return NewLoggedCpuBackend(num_threads, batch_invariant, activation_dtype);
  if (kind == "ref") return MakeRefBackend(activation_dtype);
  if (kind == "cuda-sim") {
#ifdef MLASERVE_HAVE_CUDA_SIM
    LogEvent("cuda_backend", {{"device", std::string("SIMT simulator (kernels/cuda/sim)")}});
    return cuda_sim::NewCudaBackend(
        {.batch_invariant = batch_invariant, .activation_dtype = activation_dtype});
#else
    return absl::FailedPreconditionError(
        "--backend=cuda-sim: this build has no CUDA simulator (built without the CUDA Toolkit)");
#endif
  }
  if (kind == "cuda" || kind == "auto") {
    std::string why;
    const int devices = PluginCudaDeviceCount(&why);
    if (devices > 0) {
      LogEvent("cuda_backend", {{"device", int64_t{0}}, {"devices", int64_t{devices}}});
      return NewPluginCudaBackend(0, batch_invariant, activation_dtype);
    }
    if (kind == "cuda") {
      return absl::FailedPreconditionError(absl::StrCat(
          "--backend=cuda: no usable CUDA device: ", why,
          "; use --backend=cpu, or --backend=cuda-sim to run the CUDA kernels on the simulator"));
    }
    LogEvent("backend_auto", {{"chosen", std::string("cpu")}, {"reason", why}});
    return NewLoggedCpuBackend(num_threads, batch_invariant, activation_dtype);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend: unknown value \"", kind, "\" (auto, cpu, cuda, cuda-sim or ref)"));
}

}  // namespace mlaserve
