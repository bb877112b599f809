#include "engine/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the limit the safetensors library enforces
constexpr int64_t kFp8BlockSize = 128;            // DeepSeek-V3's weight_block_size
constexpr int64_t kConvertChunkElements = 1 << 20;
constexpr char kScaleSuffix[] = "_scale_inv";
constexpr size_t kScaleSuffixSize = sizeof(kScaleSuffix) - 1;

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string DTypeString(DType t) { return std::string(DTypeName(t)); }

std::optional<DType> SafetensorsDType(std::string_view name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

// Product of the dims (all >= 0); nullopt when it does not fit in int64.
std::optional<int64_t> CheckedNumel(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

int64_t Numel(absl::Span<const int64_t> shape) { return CheckedNumel(shape).value_or(-1); }

absl::Status OpenError(const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR)
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(err)));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return OpenError(path, errno);
  std::string text;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0) text.append(chunk, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(err)));
  return text;
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

// ---------------------------------------------------------------------------------------------
// Conversion.

// The dtype Load stores a checkpoint dtype as.
DType StoredDType(DType src, bool f32) {
  if (f32) return DType::kF32;
  switch (src) {
    case DType::kF16:
      return DType::kF32;
    case DType::kF8E4M3:
      return DType::kBF16;
    default:
      return src;
  }
}

const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = F8E4M3ToF32(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

// A checkpoint tensor plus, for FP8, its block scales ([ceil(rows/128), ceil(cols/128)]).
struct Source {
  const CheckpointTensor* tensor = nullptr;
  std::vector<float> scales;
  int64_t cols = 1;
  int64_t scale_cols = 1;
};

absl::StatusOr<Source> ResolveSource(const Checkpoint& checkpoint, const std::string& name,
                                     absl::Span<const int64_t> shape) {
  Source s;
  s.tensor = checkpoint.Find(name);
  if (s.tensor == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor \"", name, "\" is not in the checkpoint"));
  }
  const CheckpointTensor& t = *s.tensor;
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": expected shape ",
                                                   ShapeString(shape), ", checkpoint has ",
                                                   ShapeString(t.shape), " (", t.file, ")"));
  }
  if (t.dtype != DType::kF8E4M3) return s;

  if (t.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor \"", name, "\": F8_E4M3 weights must be 2-D, got ", ShapeString(t.shape)));
  }
  const std::string scale_name = absl::StrCat(name, kScaleSuffix);
  const std::vector<int64_t> scale_shape = {(t.shape[0] + kFp8BlockSize - 1) / kFp8BlockSize,
                                            (t.shape[1] + kFp8BlockSize - 1) / kFp8BlockSize};
  const CheckpointTensor* scale = checkpoint.Find(scale_name);
  if (scale == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor \"", scale_name,
                                            "\" (block scales of F8_E4M3 \"", name,
                                            "\") is not in the checkpoint"));
  }
  if (scale->dtype != DType::kF32 || scale->shape != scale_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", scale_name, "\": expected F32 block scales of shape ",
                     ShapeString(scale_shape), ", checkpoint has ", DTypeString(scale->dtype), " ",
                     ShapeString(scale->shape)));
  }
  s.scales.resize(scale_shape[0] * scale_shape[1]);
  std::memcpy(s.scales.data(), scale->data, s.scales.size() * sizeof(float));
  s.cols = t.shape[1];
  s.scale_cols = scale_shape[1];
  return s;
}

inline void Put(float v, float* out) { *out = v; }
inline void Put(float v, uint16_t* out) { *out = F32ToBf16(v); }

// Converts elements [begin, end) of the source (row-major) into out[0, end - begin).
// Loads go through memcpy: safetensors data need not be aligned to the element size.
template <typename Out>
void ConvertAs(const Source& s, int64_t begin, int64_t end, Out* out) {
  const CheckpointTensor& t = *s.tensor;
  const uint8_t* src = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::kF32:
      for (int64_t e = begin; e < end; ++e) {
        float v;
        std::memcpy(&v, src + e * 4, 4);
        Put(v, out + (e - begin));
      }
      return;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t e = begin; e < end; ++e) {
        uint16_t h;
        std::memcpy(&h, src + e * 2, 2);
        Put(t.dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h), out + (e - begin));
      }
      return;
    case DType::kF8E4M3: {
      // One run per stretch of a row inside one 128x128 block, so one scale per run.
      const std::array<float, 256>& table = Fp8Table();
      for (int64_t e = begin; e < end;) {
        const int64_t row = e / s.cols, col = e % s.cols;
        const int64_t block_end = std::min(s.cols, (col / kFp8BlockSize + 1) * kFp8BlockSize);
        const int64_t run = std::min(end - e, block_end - col);
        const float scale = s.scales[(row / kFp8BlockSize) * s.scale_cols + col / kFp8BlockSize];
        for (int64_t k = 0; k < run; ++k) Put(table[src[e + k]] * scale, out + (e - begin + k));
        e += run;
      }
      return;
    }
    case DType::kI32:
      break;
  }
  MLASERVE_CHECK_MSG(false, "unreachable: checkpoint dtypes are checked when opening");
}

void Convert(const Source& s, DType to, int64_t begin, int64_t end, void* dst) {
  if (to == DType::kF32) {
    ConvertAs(s, begin, end, static_cast<float*>(dst));
  } else {
    MLASERVE_CHECK(to == DType::kBF16);
    ConvertAs(s, begin, end, static_cast<uint16_t*>(dst));
  }
}

// Writes the source, converted to `to`, into the contiguous device bytes at `dst`.
void CopyToBackend(Backend* backend, const Source& s, DType to, uint8_t* dst) {
  const int64_t numel = Numel(s.tensor->shape);
  if (numel == 0) return;
  if (to == s.tensor->dtype) {
    backend->CopyFromHost(s.tensor->data, s.tensor->nbytes, TensorView(dst, to, {numel}));
    return;
  }
  const int64_t chunk = std::min(numel, kConvertChunkElements);
  std::vector<uint8_t> scratch(chunk * DTypeSize(to));
  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t n = std::min(chunk, numel - begin);
    Convert(s, to, begin, begin + n, scratch.data());
    backend->CopyFromHost(scratch.data(), n * DTypeSize(to),
                          TensorView(dst + begin * DTypeSize(to), to, {n}));
  }
}

absl::StatusOr<TensorView> MakeView(void* data, DType dtype, absl::Span<const int64_t> s) {
  switch (s.size()) {
    case 0:
      return TensorView(data, dtype, {});
    case 1:
      return TensorView(data, dtype, {s[0]});
    case 2:
      return TensorView(data, dtype, {s[0], s[1]});
    case 3:
      return TensorView(data, dtype, {s[0], s[1], s[2]});
    case 4:
      return TensorView(data, dtype, {s[0], s[1], s[2], s[3]});
    default:
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(s), " has more than ",
                                                     TensorView::kMaxDims, " dimensions"));
  }
}

struct Loaded {
  DeviceBuffer buffer;
  TensorView view;
};

// Loads `names` (each of part_shape) one after the other into one buffer of result_shape.
absl::StatusOr<Loaded> LoadParts(const Checkpoint& checkpoint, Backend* backend,
                                 absl::Span<const std::string> names,
                                 absl::Span<const int64_t> part_shape,
                                 absl::Span<const int64_t> result_shape, bool f32) {
  std::vector<Source> sources;
  for (const std::string& name : names) {
    absl::StatusOr<Source> s = ResolveSource(checkpoint, name, part_shape);
    if (!s.ok()) return s.status();
    sources.push_back(*std::move(s));
  }
  const DType to = StoredDType(sources[0].tensor->dtype, f32);
  for (const Source& s : sources) {
    if (StoredDType(s.tensor->dtype, f32) != to) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors to concatenate differ in dtype: \"", names[0], "\" loads as ",
                       DTypeString(to), " but \"", s.tensor->name, "\" loads as ",
                       DTypeString(StoredDType(s.tensor->dtype, f32))));
    }
  }
  const int64_t part_numel = Numel(part_shape);
  absl::StatusOr<TensorView> probe = MakeView(nullptr, to, result_shape);
  if (!probe.ok()) return probe.status();

  const size_t part_bytes = static_cast<size_t>(part_numel) * DTypeSize(to);
  absl::StatusOr<DeviceBuffer> buffer = backend->Allocate(part_bytes * names.size());
  if (!buffer.ok()) return buffer.status();
  uint8_t* base = static_cast<uint8_t*>(buffer->data());
  for (size_t i = 0; i < sources.size(); ++i) {
    CopyToBackend(backend, sources[i], to, base + i * part_bytes);
  }
  absl::StatusOr<TensorView> view = MakeView(buffer->data(), to, result_shape);
  return Loaded{*std::move(buffer), *view};
}

}  // namespace

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

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::OpenImpl(const std::string& model_dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());

  // Maps one file and adds its tensors; a name seen in an earlier shard is an error.
  auto add_file = [&](const std::string& path) -> absl::Status {
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
      ckpt->mappings_.push_back({addr, bytes});
      base = static_cast<const uint8_t*>(addr);
    } else {
      ::close(fd);
    }
    absl::StatusOr<std::vector<CheckpointTensor>> tensors = ParseSafetensors(path, base, bytes);
    if (!tensors.ok()) return tensors.status();
    for (CheckpointTensor& t : *tensors) {
      auto [it, inserted] = ckpt->tensors_.try_emplace(t.name, t);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", t.name, "\" appears in both ",
                                                       it->second.file, " and ", path));
      }
    }
    return absl::OkStatus();
  };

  const std::string index_path = model_dir + "/model.safetensors.index.json";
  if (!FileExists(index_path)) {
    const std::string single = model_dir + "/model.safetensors";
    if (!FileExists(single)) {
      return absl::NotFoundError(absl::StrCat(model_dir, ": neither model.safetensors nor ",
                                              "model.safetensors.index.json exists"));
    }
    absl::Status st = add_file(single);
    if (!st.ok()) return st;
    return ckpt;
  }

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
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    const std::string* shard = it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
    if (shard == nullptr || shard->empty() || (*shard)[0] == '/' ||
        shard->find("..") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry of tensor \"",
                                                     it.key(), "\" must be a file name"));
    }
    by_shard[*shard].push_back(it.key());
  }
  for (const auto& [shard, names] : by_shard) {
    const std::string path = model_dir + "/" + shard;
    absl::Status st = add_file(path);
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

// ---------------------------------------------------------------------------------------------
// WeightLoader

WeightLoader::WeightLoader(const Checkpoint* checkpoint, Backend* backend)
    : checkpoint_(checkpoint), backend_(backend) {}

absl::StatusOr<TensorView> WeightLoader::Load(std::string_view name, std::vector<int64_t> shape) {
  const std::string names[] = {std::string(name)};
  absl::StatusOr<Loaded> loaded = LoadParts(*checkpoint_, backend_, names, shape, shape, false);
  if (!loaded.ok()) return loaded.status();
  consumed_.insert(names[0]);
  Keep(std::move(loaded->buffer));
  return loaded->view;
}

absl::StatusOr<TensorView> WeightLoader::LoadF32(std::string_view name,
                                                 std::vector<int64_t> shape) {
  const std::string names[] = {std::string(name)};
  absl::StatusOr<Loaded> loaded = LoadParts(*checkpoint_, backend_, names, shape, shape, true);
  if (!loaded.ok()) return loaded.status();
  consumed_.insert(names[0]);
  Keep(std::move(loaded->buffer));
  return loaded->view;
}

absl::StatusOr<TensorView> WeightLoader::LoadConcat(const std::vector<std::string>& names,
                                                    std::vector<int64_t> part_shape,
                                                    std::vector<int64_t> result_shape) {
  // The parts are laid back to back, so any result of count * part elements that keeps the
  // row length is a view of them: [count, rows, cols], [count * rows, cols], or [count / 2,
  // 2 * rows, cols] for interleaved gate ‖ up pairs.
  const int64_t count = static_cast<int64_t>(names.size());
  const std::optional<int64_t> part_numel = CheckedNumel(part_shape);
  const std::optional<int64_t> result_numel = CheckedNumel(result_shape);
  int64_t total = 0;
  const bool ok =
      count > 0 && !part_shape.empty() && !result_shape.empty() && part_numel.has_value() &&
      result_numel.has_value() && !__builtin_mul_overflow(*part_numel, count, &total) &&
      total == *result_numel && part_shape.back() == result_shape.back() &&
      std::all_of(result_shape.begin(), result_shape.end(), [](int64_t d) { return d >= 0; });
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadConcat of ", count, " tensors of shape ", ShapeString(part_shape), " (first \"",
        names.empty() ? "" : names[0], "\"): result shape ", ShapeString(result_shape),
        " must hold all their elements with the same last dimension"));
  }
  absl::StatusOr<Loaded> loaded =
      LoadParts(*checkpoint_, backend_, names, part_shape, result_shape, false);
  if (!loaded.ok()) return loaded.status();
  consumed_.insert(names.begin(), names.end());
  Keep(std::move(loaded->buffer));
  return loaded->view;
}

void WeightLoader::Keep(DeviceBuffer buffer) {
  weight_bytes_ += buffer.bytes();
  buffers_.push_back(std::move(buffer));
}

std::vector<std::string> WeightLoader::Unused(bool (*ignored)(std::string_view name)) const {
  std::vector<std::string> unused;
  for (const auto& [name, tensor] : checkpoint_->tensors()) {
    if (consumed_.count(name) > 0) continue;
    if (ignored != nullptr && ignored(name)) continue;
    if (name.size() > kScaleSuffixSize && name.ends_with(kScaleSuffix) &&
        consumed_.count(std::string_view(name).substr(0, name.size() - kScaleSuffixSize)) > 0) {
      continue;
    }
    unused.push_back(name);
  }
  return unused;
}

std::vector<DeviceBuffer> WeightLoader::ReleaseBuffers() {
  std::vector<DeviceBuffer> out;
  out.swap(buffers_);
  return out;
}

}  // namespace mlaserve
