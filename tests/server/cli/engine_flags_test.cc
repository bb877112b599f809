// --dtype and --backend reach the backend BackendFromFlags creates; bad values are errors that
// name the flag.
#include "server/cli/engine_flags.h"

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;

class EngineFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_backend, "cpu");
    absl::SetFlag(&FLAGS_threads, 1);
  }
  void TearDown() override {
    absl::SetFlag(&FLAGS_dtype, "float32");
    absl::SetFlag(&FLAGS_backend, "auto");
    absl::SetFlag(&FLAGS_threads, 0);
  }
};

TEST_F(EngineFlagsTest, DtypeSetsTheBackendsActivationDtype) {
  for (const auto& [flag, dtype] :
       {std::pair{"float32", DType::kF32}, std::pair{"bfloat16", DType::kBF16}}) {
    absl::SetFlag(&FLAGS_dtype, flag);
    for (const char* backend : {"cpu", "ref"}) {
      absl::SetFlag(&FLAGS_backend, backend);
      absl::StatusOr<std::unique_ptr<Backend>> b = BackendFromFlags();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ((*b)->activation_dtype(), dtype) << flag << " " << backend;
      EXPECT_EQ((*b)->name(), backend);
    }
  }
}

TEST_F(EngineFlagsTest, UnknownDtypeIsAnErrorNamingTheFlag) {
  for (const char* flag : {"float16", "bf16", ""}) {
    absl::SetFlag(&FLAGS_dtype, flag);
    absl::StatusOr<std::unique_ptr<Backend>> b = BackendFromFlags();
    ASSERT_FALSE(b.ok()) << flag;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("--dtype"));
    EXPECT_THAT(b.status().message(), HasSubstr("float32 or bfloat16"));
  }
}

}  // namespace
}  // namespace mlaserve
