#include "engine/util/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace mlaserve {

absl::Status OpenError(const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
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
  if (failed) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": read failed: ", std::strerror(err)));
  }
  return text;
}

}  // namespace mlaserve
