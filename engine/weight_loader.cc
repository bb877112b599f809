#include "engine/weight_loader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace mlaserve {
namespace {

constexpr int64_t kFp8BlockSize = 128;  // DeepSeek-V3's weight_block_size
constexpr int64_t kConvertChunkElements = 1 << 20;

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
                     ShapeString(scale_shape), ", checkpoint has ",
                     std::string(DTypeName(scale->dtype)), " ", ShapeString(scale->shape)));
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
  const int64_t numel = CheckedNumel(s.tensor->shape).value_or(-1);
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
                       std::string(DTypeName(to)), " but \"", s.tensor->name, "\" loads as ",
                       std::string(DTypeName(StoredDType(s.tensor->dtype, f32)))));
    }
  }
  const int64_t part_numel = CheckedNumel(part_shape).value_or(-1);
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
    if (name.size() > (sizeof(kScaleSuffix) - 1) && name.ends_with(kScaleSuffix) &&
        consumed_.count(
            std::string_view(name).substr(0, name.size() - (sizeof(kScaleSuffix) - 1))) > 0) {
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
