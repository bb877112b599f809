// Whole-file reads for the small files the engine and the server read (config.json, the shard
// index, tokenizer.json, tokenizer_config.json, a chat template, PEM and token files), with
// errors that name the file: NotFound when it (or a folder on its path) does not exist,
// FailedPrecondition when it cannot be opened or read (permissions, a folder, an I/O error).
#ifndef MLASERVE_ENGINE_UTIL_READ_FILE_H_
#define MLASERVE_ENGINE_UTIL_READ_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mlaserve {

// The error for a failed open(2) or fopen of `path` with errno `err`.
absl::Status OpenError(const std::string& path, int err);

// The whole content of `path`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_UTIL_READ_FILE_H_
