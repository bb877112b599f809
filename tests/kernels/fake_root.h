// FakeRoot: a scratch directory standing in for "/" in tests of code that reads /proc and /sys
// under a root prefix (cpu_threads.h, cpu_numa.h); removed when the object goes.
#ifndef MLASERVE_TESTS_KERNELS_FAKE_ROOT_H_
#define MLASERVE_TESTS_KERNELS_FAKE_ROOT_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>

namespace mlaserve::test {

class FakeRoot {
 public:
  // Holding `files`, each path (absolute, as on the running system) with its text.
  explicit FakeRoot(std::initializer_list<std::pair<std::string, std::string>> files = {}) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fake_root.XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    for (const auto& [file, text] : files) Write(file, text);
  }
  ~FakeRoot() { std::filesystem::remove_all(dir_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  const std::string& path() const { return dir_; }
  // Writes `text` to `file` (absolute, as on the running system), making its directories.
  void Write(const std::string& file, const std::string& text) const {
    const std::filesystem::path p = std::filesystem::path(dir_) / file.substr(1);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

 private:
  std::string dir_;
};

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_FAKE_ROOT_H_
