#include "engine/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/util/read_file.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the limit the safetensors library enforces

std::optional<DType> SafetensorsDType(std::string_view name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A JSON value that must be a non-negative integer that fits in int64.
std::optional<int64_t> NonNegative(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

// Parses one header entry. `data` and `data_bytes` describe the data region after the header.
absl::StatusOr<CheckpointTensor> ParseEntry(const std::string& path, const std::string& name,
                                            const Json& entry, const uint8_t* data,
                                            uint64_t data_bytes) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\": ", what));
  };
  if (!entry.is_object()) return error("header entry must be an object");
  CheckpointTensor t;
  t.name = name;
  t.file = path;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return error("\"dtype\" must be a string");
  const std::optional<DType> dtype = SafetensorsDType(dtype_it->get_ref<const std::string&>());
  if (!dtype.has_value()) {
    return error(absl::StrCat("unsupported dtype ",
                              dtype_it->dump(-1, ' ', false, Json::error_handler_t::replace),
                              " (supported: BF16, F16, F32, F8_E4M3)"));
  }
  t.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) return error("\"shape\" must be a list");
  for (const Json& d : *shape_it) {
    const std::optional<int64_t> dim = NonNegative(d);
    if (!dim.has_value()) return error("\"shape\" must hold non-negative integers");
    t.shape.push_back(*dim);
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return error("\"data_offsets\" must be [begin, end]");
  }
  const std::optional<int64_t> begin = NonNegative((*offsets_it)[0]);
  const std::optional<int64_t> end = NonNegative((*offsets_it)[1]);
  if (!begin.has_value() || !end.has_value()) {
    return error("\"data_offsets\" must hold non-negative integers");
  }
  if (*begin > *end || static_cast<uint64_t>(*end) > data_bytes) {
    return error(absl::StrCat("data_offsets [", *begin, ", ", *end,
                              "] lie outside the data region of ", data_bytes, " bytes"));
  }
  const std::optional<int64_t> numel = CheckedNumel(t.shape);
  int64_t expected_bytes = 0;
  if (!numel.has_value() ||
      __builtin_mul_overflow(*numel, static_cast<int64_t>(DTypeSize(t.dtype)), &expected_bytes)) {
    return error(absl::StrCat("shape ", ShapeString(t.shape), " is too large"));
  }
  if (*end - *begin != expected_bytes) {
    return error(absl::StrCat("data_offsets span ", *end - *begin, " bytes but shape ",
                              ShapeString(t.shape), " of ", dtype_it->get<std::string>(), " needs ",
                              expected_bytes));
  }
  t.data = data + *begin;
  t.nbytes = static_cast<size_t>(expected_bytes);
  return t;
}

// The tensor names of each shard listed by a model.safetensors.index.json.
using ShardIndex = std::map<std::string, std::vector<std::string>>;

absl::StatusOr<ShardIndex> ReadShardIndex(const std::string& index_path) {
  absl::StatusOr<std::string> text = ReadWholeFile(index_path);
  if (!text.ok()) return text.status();
  Json index;
  try {
    index = Json::parse(*text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not valid JSON: ", e.what()));
  }
  auto map_it = index.is_object() ? index.find("weight_map") : index.end();
  if (map_it == index.end() || !map_it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": \"weight_map\" must be an object"));
  }
  ShardIndex by_shard;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    const std::string* shard = it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
    if (shard == nullptr || shard->empty() || (*shard)[0] == '/' ||
        shard->find("..") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry of tensor \"",
                                                     it.key(), "\" must be a file name"));
    }
    by_shard[*shard].push_back(it.key());
  }
  return by_shard;
}

}  // namespace

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::optional<int64_t> CheckedNumel(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

absl::StatusOr<std::vector<CheckpointTensor>> ParseSafetensors(const std::string& path,
                                                               const uint8_t* base,
                                                               uint64_t file_bytes) {
  if (file_bytes < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": truncated: ", file_bytes, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | base[i];
  if (header_bytes > file_bytes - 8 || header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_bytes,
                                                   " exceeds the file (", file_bytes,
                                                   " bytes) or the 100 MiB limit"));
  }
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  Json header;
  try {
    header = Json::parse(header_begin, header_begin + header_bytes);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header must be a JSON object"));
  }
  const uint8_t* data = base + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  std::vector<CheckpointTensor> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    absl::StatusOr<CheckpointTensor> t = ParseEntry(path, it.key(), it.value(), data, data_bytes);
    if (!t.ok()) return t.status();
    tensors.push_back(*std::move(t));
  }
  // Tensors must not share bytes (the format forbids it; overlap means a corrupt header).
  // Empty tensors own no bytes: the safetensors writer puts them at the next tensor's offset.
  std::vector<const CheckpointTensor*> by_offset;
  for (const CheckpointTensor& t : tensors) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const CheckpointTensor* a, const CheckpointTensor* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const CheckpointTensor& prev = *by_offset[i - 1];
    if (static_cast<const uint8_t*>(prev.data) + prev.nbytes >
        static_cast<const uint8_t*>(by_offset[i]->data)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", by_offset[i]->name,
                                                     "\" overlaps tensor \"", prev.name, "\""));
    }
  }
  return tensors;
}

Checkpoint::~Checkpoint() {
  for (const Mapping& m : mappings_) ::munmap(m.addr, m.bytes);
}

const CheckpointTensor* Checkpoint::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  try {
    return OpenImpl(model_dir);
  } catch (const std::exception& e) {  // nlohmann-json throws; nothing else here should
    return absl::InternalError(
        absl::StrCat(model_dir, ": opening the checkpoint failed: ", e.what()));
  }
}

// Maps one file and adds its tensors; a name seen in an earlier shard is an error.
absl::Status Checkpoint::AddFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  const uint8_t* base = nullptr;
  if (bytes > 0) {
    void* addr = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (addr == MAP_FAILED) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    mappings_.push_back({addr, bytes});
    base = static_cast<const uint8_t*>(addr);
  } else {
    ::close(fd);
  }
  absl::StatusOr<std::vector<CheckpointTensor>> tensors = ParseSafetensors(path, base, bytes);
  if (!tensors.ok()) return tensors.status();
  for (CheckpointTensor& t : *tensors) {
    auto [it, inserted] = tensors_.try_emplace(t.name, t);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name, "\" appears in both ", it->second.file, " and ", path));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::OpenImpl(const std::string& model_dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());

  const std::string index_path = model_dir + "/model.safetensors.index.json";
  if (!FileExists(index_path)) {
    const std::string single = model_dir + "/model.safetensors";
    if (!FileExists(single)) {
      return absl::NotFoundError(absl::StrCat(model_dir, ": neither model.safetensors nor ",
                                              "model.safetensors.index.json exists"));
    }
    absl::Status st = ckpt->AddFile(single);
    if (!st.ok()) return st;
    return ckpt;
  }

  absl::StatusOr<ShardIndex> by_shard = ReadShardIndex(index_path);
  if (!by_shard.ok()) return by_shard.status();
  for (const auto& [shard, names] : *by_shard) {
    const std::string path = model_dir + "/" + shard;
    absl::Status st = ckpt->AddFile(path);
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("shard \"", shard, "\" listed in ", index_path, " for tensor \"",
                                  names[0], "\": ", st.message()));
    }
    for (const std::string& name : names) {
      const CheckpointTensor* t = ckpt->Find(name);
      if (t == nullptr || t->file != path) {
        return absl::NotFoundError(absl::StrCat("tensor \"", name, "\" is listed in ", index_path,
                                                " for shard \"", shard, "\" but is not in it"));
      }
    }
  }
  return ckpt;
}

}  // namespace mlaserve
