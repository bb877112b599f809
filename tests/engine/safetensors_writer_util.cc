#include "tests/engine/safetensors_writer_util.h"

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "kernels/dtype.h"
#include "nlohmann/json.hpp"

namespace mlaserve {
namespace {

template <typename T>
std::string ToBytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // x86: LE
  return bytes;
}

}  // namespace

SafetensorsWriter& SafetensorsWriter::Add(std::string name, std::string dtype,
                                          std::vector<int64_t> shape, std::string bytes) {
  entries_.push_back({std::move(name), std::move(dtype), std::move(shape), std::move(bytes)});
  return *this;
}

SafetensorsWriter& SafetensorsWriter::AddF32(std::string name, std::vector<int64_t> shape,
                                             const std::vector<float>& values) {
  return Add(std::move(name), "F32", std::move(shape), ToBytes(values));
}

SafetensorsWriter& SafetensorsWriter::AddBf16(std::string name, std::vector<int64_t> shape,
                                              const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(F32ToBf16(v));
  return Add(std::move(name), "BF16", std::move(shape), ToBytes(bits));
}

SafetensorsWriter& SafetensorsWriter::AddF16Bits(std::string name, std::vector<int64_t> shape,
                                                 const std::vector<uint16_t>& bits) {
  return Add(std::move(name), "F16", std::move(shape), ToBytes(bits));
}

SafetensorsWriter& SafetensorsWriter::AddF8Bits(std::string name, std::vector<int64_t> shape,
                                                const std::vector<uint8_t>& bits) {
  return Add(std::move(name), "F8_E4M3", std::move(shape), ToBytes(bits));
}

SafetensorsWriter& SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
  return *this;
}

std::string SafetensorsWriter::HeaderJson() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  return header.dump();
}

std::string SafetensorsWriter::Bytes() const {
  std::string header = HeaderJson();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data;
  for (const Entry& e : entries_) data += e.bytes;
  return RawSafetensors(header, data);
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  return WriteBytes(path, Bytes());
}

std::string RawSafetensors(uint64_t header_length, std::string_view header, std::string_view data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header_length >> (8 * i)) & 0xff));
  out.append(header);
  out.append(data);
  return out;
}

std::string RawSafetensors(std::string_view header, std::string_view data) {
  return RawSafetensors(header.size(), header, data);
}

absl::Status WriteBytes(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot create ", path));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteSafetensorsIndex(const std::string& dir,
                                   const std::map<std::string, std::string>& weight_map) {
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  return WriteBytes(dir + "/model.safetensors.index.json", index.dump(2));
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mlaserve_test_XXXXXX").string();
  MLASERVE_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace mlaserve
