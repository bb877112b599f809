#include "engine/weight_loader.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/copy_only_backend.h"
#include "tests/engine/safetensors_writer_util.h"

namespace mlaserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Hand-decoded float8 e4m3fn bit patterns (sign, 4 exponent bits with bias 7, 3 mantissa bits).
constexpr uint8_t kF8One = 0x38;          // 0 0111 000 = 1.0
constexpr uint8_t kF8Two = 0x40;          // 0 1000 000 = 2.0
constexpr uint8_t kF8Max = 0x7e;          // 0 1111 110 = 1.75 * 2^8 = 448
constexpr uint8_t kF8MinusThreeQ = 0xb4;  // 1 0110 100 = -1.5 * 2^-1 = -0.75
constexpr uint8_t kF8Tiny = 0x01;         // 0 0000 001 = subnormal 1/8 * 2^-6 = 2^-9
constexpr uint8_t kF8NineEighths = 0x39;  // 0 0111 001 = 1.125
constexpr uint8_t kF8NaN = 0x7f;          // 0 1111 111 = NaN (e4m3fn has no infinity)

// Hand-decoded IEEE binary16 bit patterns.
constexpr uint16_t kF16One = 0x3c00;        // 1.0
constexpr uint16_t kF16MinusTwo = 0xc000;   // -2.0
constexpr uint16_t kF16Third = 0x3555;      // 1.0101010101b * 2^-2 = 0.333251953125
constexpr uint16_t kF16Subnormal = 0x0001;  // 2^-24
constexpr uint16_t kF16Max = 0x7bff;        // 65504

std::vector<float> ReadF32(const TensorView& v) {
  EXPECT_EQ(v.dtype(), DType::kF32);
  const float* p = v.ptr<float>();
  return std::vector<float>(p, p + v.numel());
}

std::vector<uint16_t> ReadBf16Bits(const TensorView& v) {
  EXPECT_EQ(v.dtype(), DType::kBF16);
  const uint16_t* p = v.ptr<uint16_t>();
  return std::vector<uint16_t>(p, p + v.numel());
}

std::vector<int64_t> Shape(const TensorView& v) {
  std::vector<int64_t> s;
  for (int d = 0; d < v.ndim(); ++d) s.push_back(v.size(d));
  return s;
}

class WeightsTest : public ::testing::Test {
 protected:
  // Opens dir_ (expecting success).
  std::unique_ptr<Checkpoint> OpenOk() {
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  // Writes `bytes` as model.safetensors and returns the error opening it gives.
  absl::Status OpenRaw(const std::string& bytes) {
    EXPECT_TRUE(WriteBytes(dir_.File("model.safetensors"), bytes).ok());
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
    return c.status();
  }

  TempDir dir_;
  CopyOnlyBackend backend_;
};

TEST(Fp8DecodingTest, HandDecodedPatternsMatchDType) {
  EXPECT_EQ(F8E4M3ToF32(kF8One), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(kF8Two), 2.0f);
  EXPECT_EQ(F8E4M3ToF32(kF8Max), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(kF8MinusThreeQ), -0.75f);
  EXPECT_EQ(F8E4M3ToF32(kF8Tiny), 0.001953125f);
  EXPECT_EQ(F8E4M3ToF32(kF8NineEighths), 1.125f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(kF8NaN)));
}

TEST_F(WeightsTest, SingleFileBf16F32F16) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.AddBf16("a.bf16", {2, 3}, {1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 65536.0f});
  w.AddF32("b.f32", {4}, {1.5f, -0.0f, 1e-30f, 3.0f});
  w.AddF16Bits("c.f16", {5}, {kF16One, kF16MinusTwo, kF16Third, kF16Subnormal, kF16Max});
  w.AddBf16("norm.weight", {3}, {0.5f, 2.0f, -1.0f});
  w.AddF32("scalar", {}, {7.0f});
  ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ckpt->tensors().size(), 5u);
  const CheckpointTensor* a = ckpt->Find("a.bf16");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kBF16);
  EXPECT_THAT(a->shape, ElementsAre(2, 3));
  EXPECT_EQ(a->nbytes, 12u);
  EXPECT_EQ(a->file, dir_.File("model.safetensors"));
  EXPECT_EQ(ckpt->Find("nope"), nullptr);

  WeightLoader loader(ckpt.get(), &backend_);
  absl::StatusOr<TensorView> bf16 = loader.Load("a.bf16", {2, 3});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_THAT(Shape(*bf16), ElementsAre(2, 3));
  // bf16 stays bf16: 1.0 = 0x3f80, -2 = 0xc000, 0.5 = 0x3f00, 3.25 = 0x4050, -0.125 = 0xbe00,
  // 65536 = 0x4780.
  EXPECT_THAT(ReadBf16Bits(*bf16), ElementsAre(0x3f80, 0xc000, 0x3f00, 0x4050, 0xbe00, 0x4780));

  absl::StatusOr<TensorView> f32 = loader.Load("b.f32", {4});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_THAT(ReadF32(*f32), ElementsAre(1.5f, -0.0f, 1e-30f, 3.0f));
  EXPECT_TRUE(std::signbit(ReadF32(*f32)[1]));

  absl::StatusOr<TensorView> f16 = loader.Load("c.f16", {5});  // F16 becomes f32
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_THAT(ReadF32(*f16),
              ElementsAre(1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f, 65504.0f));

  absl::StatusOr<TensorView> norm = loader.LoadF32("norm.weight", {3});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_THAT(ReadF32(*norm), ElementsAre(0.5f, 2.0f, -1.0f));

  absl::StatusOr<TensorView> scalar = loader.Load("scalar", {});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->ndim(), 0);
  EXPECT_THAT(ReadF32(*scalar), ElementsAre(7.0f));

  EXPECT_EQ(loader.weight_bytes(), 12u + 16u + 20u + 12u + 4u);
  EXPECT_THAT(loader.Unused(nullptr), IsEmpty());
  std::vector<DeviceBuffer> buffers = loader.ReleaseBuffers();
  EXPECT_EQ(buffers.size(), 5u);
  EXPECT_THAT(ReadBf16Bits(*bf16), ElementsAre(0x3f80, 0xc000, 0x3f00, 0x4050, 0xbe00, 0x4780));
}

// The safetensors writer gives an empty tensor the offset of the tensor after it.
TEST_F(WeightsTest, EmptyTensorSharesOffsetWithNext) {
  SafetensorsWriter w;
  w.AddF32("a", {1}, {1.0f});
  w.AddF32("empty", {0, 4}, {});
  w.AddF32("z", {1}, {2.0f});
  ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);
  absl::StatusOr<TensorView> empty = loader.Load("empty", {0, 4});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->numel(), 0);
  absl::StatusOr<TensorView> z = loader.Load("z", {1});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_THAT(ReadF32(*z), ElementsAre(2.0f));
}

// A [130, 260] F8 weight: block rows {0..127, 128..129}, block cols {0..127, 128..255, 256..259}.
class Fp8Test : public WeightsTest {
 protected:
  static constexpr int64_t kRows = 130, kCols = 260;
  void SetUp() override {
    bits_.assign(kRows * kCols, kF8One);
    Set(0, 0, kF8Two);
    Set(0, 127, kF8Max);
    Set(0, 128, kF8MinusThreeQ);
    Set(127, 259, kF8Tiny);
    Set(129, 255, kF8NineEighths);
    Set(129, 256, kF8NineEighths);
    Set(129, 259, kF8NaN);
    scales_ = {0.5f,  2.0f,  4.0f,          // block row 0
               -1.0f, 0.25f, 1.00390625f};  // block row 1 (1 + 2^-8)
  }
  void Set(int64_t r, int64_t c, uint8_t v) { bits_[r * kCols + c] = v; }
  float Scale(int64_t r, int64_t c) const { return scales_[(r / 128) * 3 + c / 128]; }
  void WriteCheckpoint() {
    SafetensorsWriter w;
    w.AddF8Bits("w.weight", {kRows, kCols}, bits_);
    w.AddF32("w.weight_scale_inv", {2, 3}, scales_);
    w.AddF32("gate.e_score_correction_bias", {4}, {0.25f, -0.5f, 1.0f, 0.0f});
    ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  }
  std::vector<uint8_t> bits_;
  std::vector<float> scales_;
};

TEST_F(Fp8Test, DequantizesWithBlockScalesToBf16) {
  WriteCheckpoint();
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);
  absl::StatusOr<TensorView> w = loader.Load("w.weight", {kRows, kCols});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dtype(), DType::kBF16);
  EXPECT_THAT(Shape(*w), ElementsAre(kRows, kCols));
  const std::vector<uint16_t> out = ReadBf16Bits(*w);
  auto at = [&](int64_t r, int64_t c) { return Bf16ToF32(out[r * kCols + c]); };

  EXPECT_EQ(at(0, 0), 1.0f);            // 2 * 0.5
  EXPECT_EQ(at(0, 1), 0.5f);            // 1 * 0.5
  EXPECT_EQ(at(0, 127), 224.0f);        // 448 * 0.5
  EXPECT_EQ(at(0, 128), -1.5f);         // -0.75 * 2
  EXPECT_EQ(at(5, 200), 2.0f);          // 1 * 2
  EXPECT_EQ(at(127, 258), 4.0f);        // 1 * 4
  EXPECT_EQ(at(127, 259), 0.0078125f);  // 2^-9 * 4
  EXPECT_EQ(at(128, 0), -1.0f);         // 1 * -1
  EXPECT_EQ(at(128, 200), 0.25f);       // 1 * 0.25
  EXPECT_EQ(at(129, 255), 0.28125f);    // 1.125 * 0.25
  // 1.125 * (1 + 2^-8) = 1.12939453125 lies between bf16 neighbours 1.125 and 1.1328125 and
  // is nearer the latter: 0x3f91.
  EXPECT_EQ(out[129 * kCols + 256], 0x3f91);
  // 1 * (1 + 2^-8) is the exact midpoint of 1.0 (0x3f80) and 1.0078125 (0x3f81): ties to even.
  EXPECT_EQ(out[129 * kCols + 257], 0x3f80);
  EXPECT_TRUE(std::isnan(at(129, 259)));
  // Every other element is 1.0 times its block's scale (all exact in bf16 but the last
  // block's, which rounds to 1.0 as above).
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      if (bits_[r * kCols + c] != kF8One) continue;
      const float want = r >= 128 && c >= 256 ? 1.0f : Scale(r, c);
      ASSERT_EQ(at(r, c), want) << r << ", " << c;
    }
  }

  // The correction bias (F32) is loaded as f32; the scales are not reported unused.
  absl::StatusOr<TensorView> bias = loader.LoadF32("gate.e_score_correction_bias", {4});
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_THAT(ReadF32(*bias), ElementsAre(0.25f, -0.5f, 1.0f, 0.0f));
  EXPECT_THAT(loader.Unused(nullptr), IsEmpty());
  EXPECT_EQ(loader.weight_bytes(), static_cast<uint64_t>(kRows * kCols * 2 + 16));
}

TEST_F(Fp8Test, LoadF32KeepsFullPrecision) {
  WriteCheckpoint();
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);
  absl::StatusOr<TensorView> w = loader.LoadF32("w.weight", {kRows, kCols});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<float> out = ReadF32(*w);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[127], 224.0f);
  EXPECT_EQ(out[129 * kCols + 256], 1.12939453125f);
  EXPECT_EQ(out[129 * kCols + 257], 1.00390625f);
  EXPECT_EQ(out[127 * kCols + 259], 0.0078125f);
  EXPECT_TRUE(std::isnan(out[129 * kCols + 259]));
  // Unused lists what was not loaded, minus ignored names; never the consumed weight's scales.
  EXPECT_THAT(loader.Unused(nullptr), ElementsAre("gate.e_score_correction_bias"));
  EXPECT_THAT(loader.Unused([](std::string_view n) { return n.starts_with("gate."); }), IsEmpty());
}

TEST_F(Fp8Test, UnloadedWeightReportsItsScalesToo) {
  WriteCheckpoint();
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);
  EXPECT_THAT(loader.Unused(nullptr),
              ElementsAre("gate.e_score_correction_bias", "w.weight", "w.weight_scale_inv"));
}

TEST_F(Fp8Test, ScaleErrors) {
  {
    SafetensorsWriter w;
    w.AddF8Bits("w.weight", {kRows, kCols}, bits_);
    ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
    std::unique_ptr<Checkpoint> ckpt = OpenOk();
    ASSERT_NE(ckpt, nullptr);
    WeightLoader loader(ckpt.get(), &backend_);
    absl::StatusOr<TensorView> t = loader.Load("w.weight", {kRows, kCols});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(t.status().message(), HasSubstr("\"w.weight_scale_inv\""));
  }
  {
    SafetensorsWriter w;
    w.AddF8Bits("w.weight", {kRows, kCols}, bits_);
    w.AddF32("w.weight_scale_inv", {1, 3}, {1, 1, 1});  // should be [2, 3]
    ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
    std::unique_ptr<Checkpoint> ckpt = OpenOk();
    ASSERT_NE(ckpt, nullptr);
    WeightLoader loader(ckpt.get(), &backend_);
    absl::StatusOr<TensorView> t = loader.Load("w.weight", {kRows, kCols});
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("\"w.weight_scale_inv\""));
    EXPECT_THAT(t.status().message(), HasSubstr("[2, 3]"));
    EXPECT_THAT(t.status().message(), HasSubstr("[1, 3]"));
  }
  {
    SafetensorsWriter w;
    w.AddF8Bits("w.weight", {kRows, kCols}, bits_);
    w.AddBf16("w.weight_scale_inv", {2, 3}, {1, 1, 1, 1, 1, 1});  // must be F32
    ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
    std::unique_ptr<Checkpoint> ckpt = OpenOk();
    ASSERT_NE(ckpt, nullptr);
    WeightLoader loader(ckpt.get(), &backend_);
    absl::StatusOr<TensorView> t = loader.Load("w.weight", {kRows, kCols});
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("bfloat16"));
  }
  {
    SafetensorsWriter w;
    w.AddF8Bits("v", {4}, {kF8One, kF8One, kF8One, kF8One});  // block scales need 2-D
    w.AddF32("v_scale_inv", {1}, {1});
    ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
    std::unique_ptr<Checkpoint> ckpt = OpenOk();
    ASSERT_NE(ckpt, nullptr);
    WeightLoader loader(ckpt.get(), &backend_);
    absl::StatusOr<TensorView> t = loader.Load("v", {4});
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("\"v\""));
  }
}

TEST_F(WeightsTest, LoadErrors) {
  SafetensorsWriter w;
  w.AddBf16("x", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.AddF32("five_d", {1, 1, 1, 1, 2}, {1, 2});
  ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);

  absl::StatusOr<TensorView> t = loader.Load("model.missing.weight", {2, 3});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("\"model.missing.weight\""));

  t = loader.Load("x", {3, 2});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("\"x\": expected shape [3, 2], checkpoint has [2, 3]"));
  t = loader.LoadF32("x", {6});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("expected shape [6]"));

  t = loader.Load("five_d", {1, 1, 1, 1, 2});  // TensorView holds at most 4 dims
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("dimensions"));

  // Failed loads consume nothing.
  EXPECT_THAT(loader.Unused(nullptr), ElementsAre("five_d", "x"));
  EXPECT_EQ(loader.weight_bytes(), 0u);
}

TEST_F(WeightsTest, LoadConcatStacksAndConcatenates) {
  SafetensorsWriter w;
  for (int e = 0; e < 3; ++e) {
    const float b = 10.0f * e;
    w.AddBf16("experts." + std::to_string(e) + ".w", {2, 3},
              {b, b + 1, b + 2, b + 3, b + 4, b + 5});
  }
  w.AddF16Bits("f16.a", {1, 2}, {kF16One, kF16MinusTwo});
  w.AddF32("f32.b", {1, 2}, {3.0f, 4.0f});
  ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);
  const std::vector<std::string> experts = {"experts.0.w", "experts.1.w", "experts.2.w"};

  absl::StatusOr<TensorView> stacked = loader.LoadConcat(experts, {2, 3}, {3, 2, 3});
  ASSERT_TRUE(stacked.ok()) << stacked.status();
  EXPECT_THAT(Shape(*stacked), ElementsAre(3, 2, 3));
  std::vector<float> got;
  for (uint16_t b : ReadBf16Bits(*stacked)) got.push_back(Bf16ToF32(b));
  EXPECT_THAT(got, ElementsAre(0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25));

  absl::StatusOr<TensorView> cat =
      loader.LoadConcat({"experts.2.w", "experts.0.w"}, {2, 3}, {4, 3});
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_THAT(Shape(*cat), ElementsAre(4, 3));
  got.clear();
  for (uint16_t b : ReadBf16Bits(*cat)) got.push_back(Bf16ToF32(b));
  EXPECT_THAT(got, ElementsAre(20, 21, 22, 23, 24, 25, 0, 1, 2, 3, 4, 5));

  // F16 (-> f32) and F32 share a dtype after conversion.
  absl::StatusOr<TensorView> mixed = loader.LoadConcat({"f16.a", "f32.b"}, {1, 2}, {2, 2});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(ReadF32(*mixed), ElementsAre(1.0f, -2.0f, 3.0f, 4.0f));
  EXPECT_THAT(loader.Unused(nullptr), IsEmpty());
}

TEST_F(WeightsTest, LoadConcatErrors) {
  SafetensorsWriter w;
  w.AddBf16("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.AddBf16("b", {3, 2}, {1, 2, 3, 4, 5, 6});
  w.AddF16Bits("c", {2, 3}, {kF16One, kF16One, kF16One, kF16One, kF16One, kF16One});
  ASSERT_TRUE(w.Write(dir_.File("model.safetensors")).ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  WeightLoader loader(ckpt.get(), &backend_);

  absl::StatusOr<TensorView> t = loader.LoadConcat({"a", "c"}, {2, 3}, {2, 2, 3});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("\"a\" loads as bfloat16"));
  EXPECT_THAT(t.status().message(), HasSubstr("\"c\" loads as float32"));

  t = loader.LoadConcat({"a", "b"}, {2, 3}, {2, 2, 3});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(),
              HasSubstr("\"b\": expected shape [2, 3], checkpoint has [3, 2]"));

  t = loader.LoadConcat({"a", "a"}, {2, 3}, {2, 3});  // too few elements
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("result shape [2, 3]"));
  t = loader.LoadConcat({"a", "a"}, {2, 3}, {3, 4});  // right count, wrong row length
  ASSERT_FALSE(t.ok());
  t = loader.LoadConcat({}, {2, 3}, {0, 2, 3});
  ASSERT_FALSE(t.ok());
  t = loader.LoadConcat({"missing"}, {2, 3}, {1, 2, 3});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("\"missing\""));
  EXPECT_THAT(loader.Unused(nullptr), ElementsAre("a", "b", "c"));
}

// Two shards and an index, as Hugging Face writes them.
TEST_F(WeightsTest, ShardedCheckpoint) {
  SafetensorsWriter s1, s2;
  s1.AddBf16("model.embed_tokens.weight", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  s1.AddBf16("experts.0.w", {1, 2}, {1, 2});
  s2.AddBf16("experts.1.w", {1, 2}, {3, 4});
  s2.AddF32("model.norm.weight", {2}, {0.5f, 0.25f});
  s2.AddF32("model.layers.0.self_attn.rotary_emb.inv_freq", {1}, {1.0f});
  ASSERT_TRUE(s1.Write(dir_.File("model-00001-of-00002.safetensors")).ok());
  ASSERT_TRUE(s2.Write(dir_.File("model-00002-of-00002.safetensors")).ok());
  ASSERT_TRUE(WriteSafetensorsIndex(
                  dir_.path(), {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                                {"experts.0.w", "model-00001-of-00002.safetensors"},
                                {"experts.1.w", "model-00002-of-00002.safetensors"},
                                {"model.norm.weight", "model-00002-of-00002.safetensors"},
                                {"model.layers.0.self_attn.rotary_emb.inv_freq",
                                 "model-00002-of-00002.safetensors"}})
                  .ok());
  // A stray model.safetensors is ignored when an index exists.
  ASSERT_TRUE(WriteBytes(dir_.File("model.safetensors"), "garbage").ok());
  std::unique_ptr<Checkpoint> ckpt = OpenOk();
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ckpt->tensors().size(), 5u);
  EXPECT_EQ(ckpt->Find("model.norm.weight")->file, dir_.File("model-00002-of-00002.safetensors"));

  WeightLoader loader(ckpt.get(), &backend_);
  absl::StatusOr<TensorView> experts =
      loader.LoadConcat({"experts.0.w", "experts.1.w"}, {1, 2}, {2, 1, 2});
  ASSERT_TRUE(experts.ok()) << experts.status();
  EXPECT_THAT(ReadBf16Bits(*experts), ElementsAre(0x3f80, 0x4000, 0x4040, 0x4080));
  absl::StatusOr<TensorView> norm = loader.LoadF32("model.norm.weight", {2});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_THAT(ReadF32(*norm), ElementsAre(0.5f, 0.25f));

  EXPECT_THAT(loader.Unused(nullptr), ElementsAre("model.embed_tokens.weight",
                                                  "model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_THAT(loader.Unused([](std::string_view n) { return n.ends_with("inv_freq"); }),
              ElementsAre("model.embed_tokens.weight"));
}

TEST_F(WeightsTest, MissingShardIsNamed) {
  SafetensorsWriter s1;
  s1.AddBf16("a", {1}, {1});
  ASSERT_TRUE(s1.Write(dir_.File("model-00001-of-00002.safetensors")).ok());
  ASSERT_TRUE(WriteSafetensorsIndex(dir_.path(), {{"a", "model-00001-of-00002.safetensors"},
                                                  {"b", "model-00002-of-00002.safetensors"}})
                  .ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(c.status().message(), HasSubstr("\"b\""));
}

TEST_F(WeightsTest, TensorMissingFromItsShardIsNamed) {
  SafetensorsWriter s1, s2;
  s1.AddBf16("a", {1}, {1});
  s2.AddBf16("b", {1}, {1});
  ASSERT_TRUE(s1.Write(dir_.File("s1.safetensors")).ok());
  ASSERT_TRUE(s2.Write(dir_.File("s2.safetensors")).ok());
  // "c" is in no shard; "b" is listed under the wrong one.
  ASSERT_TRUE(
      WriteSafetensorsIndex(dir_.path(), {{"a", "s1.safetensors"}, {"c", "s1.safetensors"}}).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("tensor \"c\""));
  EXPECT_THAT(c.status().message(), HasSubstr("s1.safetensors"));

  ASSERT_TRUE(
      WriteSafetensorsIndex(dir_.path(), {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}).ok());
  c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("tensor \"b\""));
}

TEST_F(WeightsTest, IndexErrors) {
  ASSERT_TRUE(WriteBytes(dir_.File("model.safetensors.index.json"), "{not json").ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("model.safetensors.index.json"));

  ASSERT_TRUE(WriteBytes(dir_.File("model.safetensors.index.json"), "{\"metadata\": {}}").ok());
  c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("weight_map"));

  for (const char* bad : {"{\"weight_map\": {\"a\": 3}}", "{\"weight_map\": {\"a\": \"../x\"}}",
                          "{\"weight_map\": {\"a\": \"/etc/passwd\"}}"}) {
    ASSERT_TRUE(WriteBytes(dir_.File("model.safetensors.index.json"), bad).ok());
    c = Checkpoint::Open(dir_.path());
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_THAT(c.status().message(), HasSubstr("\"a\"")) << bad;
  }
}

TEST_F(WeightsTest, DuplicateTensorAcrossShards) {
  SafetensorsWriter s;
  s.AddBf16("a", {1}, {1});
  ASSERT_TRUE(s.Write(dir_.File("s1.safetensors")).ok());
  SafetensorsWriter s3;
  s3.AddBf16("b", {1}, {1});
  s3.AddBf16("a", {1}, {1});
  ASSERT_TRUE(s3.Write(dir_.File("s2.safetensors")).ok());
  ASSERT_TRUE(
      WriteSafetensorsIndex(dir_.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("\"a\" appears in both"));
}

TEST_F(WeightsTest, NoCheckpointFiles) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(dir_.path()));
  c = Checkpoint::Open(dir_.File("does-not-exist"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// Corrupt files. Each must give an error naming the file or the tensor, never a crash.

TEST_F(WeightsTest, TruncatedBeforeHeaderLength) {
  for (const std::string& bytes : {std::string(), std::string("\x10\x00\x00", 3)}) {
    const absl::Status st = OpenRaw(bytes);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("model.safetensors: truncated"));
  }
}

TEST_F(WeightsTest, HeaderLengthBeyondFile) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  for (uint64_t length :
       {uint64_t{header.size() + 5}, uint64_t{1} << 40, std::numeric_limits<uint64_t>::max()}) {
    const absl::Status st = OpenRaw(RawSafetensors(length, header, std::string(4, '\0')));
    ASSERT_FALSE(st.ok()) << length;
    EXPECT_THAT(st.message(), HasSubstr("header length")) << length;
  }
}

TEST_F(WeightsTest, HeaderNotJsonObject) {
  for (const char* header : {"{\"a\":", "[1, 2]", "\"x\"", ""}) {
    const absl::Status st = OpenRaw(RawSafetensors(header, ""));
    ASSERT_FALSE(st.ok()) << header;
    EXPECT_THAT(st.message(), HasSubstr("header")) << header;
  }
}

struct BadEntry {
  const char* entry;   // the JSON header entry of tensor "t"
  size_t data_bytes;   // bytes after the header
  const char* expect;  // in the error
};

class CorruptEntryTest : public WeightsTest, public ::testing::WithParamInterface<BadEntry> {};

TEST_P(CorruptEntryTest, NamesTheTensor) {
  const BadEntry& p = GetParam();
  const std::string header = std::string(
                                 "{\"ok\":{\"dtype\":\"F32\",\"shape\":[],"
                                 "\"data_offsets\":[0,4]},\"t\":") +
                             p.entry + "}";
  const absl::Status st = OpenRaw(RawSafetensors(header, std::string(p.data_bytes, '\0')));
  ASSERT_FALSE(st.ok()) << p.entry;
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("model.safetensors: tensor \"t\""));
  EXPECT_THAT(st.message(), HasSubstr(p.expect));
}

INSTANTIATE_TEST_SUITE_P(
    Entries, CorruptEntryTest,
    ::testing::Values(
        // offsets out of range
        BadEntry{R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})", 8, "outside the data"},
        BadEntry{R"({"dtype":"F32","shape":[2],"data_offsets":[12,4]})", 16, "outside the data"},
        BadEntry{R"({"dtype":"F32","shape":[0],"data_offsets":[100,100]})", 8, "outside the data"},
        BadEntry{
            R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]})",
            8, "data_offsets"},
        BadEntry{R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 8, "data_offsets"},
        BadEntry{R"({"dtype":"F32","shape":[1],"data_offsets":[4]})", 8, "data_offsets"},
        BadEntry{R"({"dtype":"F32","shape":[1],"data_offsets":[4,8,12]})", 16, "data_offsets"},
        BadEntry{R"({"dtype":"F32","shape":[1]})", 8, "data_offsets"},
        // shape / size mismatch
        BadEntry{R"({"dtype":"F32","shape":[2,3],"data_offsets":[4,24]})", 24,
                 "span 20 bytes but shape [2, 3] of F32 needs 24"},
        BadEntry{R"({"dtype":"BF16","shape":[3],"data_offsets":[4,12]})", 12, "needs 6"},
        BadEntry{R"({"dtype":"F8_E4M3","shape":[4],"data_offsets":[4,12]})", 12, "needs 4"},
        // overflowing products
        BadEntry{R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[4,8]})", 8,
                 "too large"},
        BadEntry{R"({"dtype":"F32","shape":[2305843009213693952],"data_offsets":[4,8]})", 8,
                 "too large"},
        BadEntry{R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[4,8]})", 8,
                 "shape"},
        // malformed fields
        BadEntry{R"({"dtype":"F32","shape":[-1],"data_offsets":[4,8]})", 8, "shape"},
        BadEntry{R"({"dtype":"F32","shape":["2"],"data_offsets":[4,12]})", 12, "shape"},
        BadEntry{R"({"dtype":"F32","shape":2,"data_offsets":[4,12]})", 12, "shape"},
        BadEntry{R"({"dtype":"F32","shape":[1.5],"data_offsets":[4,8]})", 8, "shape"},
        BadEntry{R"({"shape":[1],"data_offsets":[4,8]})", 8, "dtype"},
        BadEntry{R"({"dtype":7,"shape":[1],"data_offsets":[4,8]})", 8, "dtype"},
        BadEntry{R"([1, 2])", 8, "object"},
        // unsupported dtypes
        BadEntry{R"({"dtype":"F64","shape":[1],"data_offsets":[4,12]})", 12,
                 "unsupported dtype \"F64\""},
        BadEntry{R"({"dtype":"I64","shape":[1],"data_offsets":[4,12]})", 12, "unsupported dtype"},
        BadEntry{R"({"dtype":"F8_E5M2","shape":[1],"data_offsets":[4,5]})", 8, "unsupported dtype"},
        BadEntry{R"({"dtype":"bf16","shape":[1],"data_offsets":[4,6]})", 8, "unsupported dtype"},
        // overlapping the first tensor
        BadEntry{R"({"dtype":"F32","shape":[1],"data_offsets":[2,6]})", 8, "overlaps"}));

TEST_F(WeightsTest, TruncatedDataRegion) {
  SafetensorsWriter w;
  w.AddF32("first", {2}, {1, 2});
  w.AddF32("last", {4}, {1, 2, 3, 4});
  const std::string bytes = w.Bytes();
  const absl::Status st = OpenRaw(bytes.substr(0, bytes.size() - 1));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("tensor \"last\""));
  EXPECT_THAT(st.message(), HasSubstr("outside the data region"));
}

// Every prefix of a valid file, and every single-byte corruption of its header, opens cleanly
// or fails with a status (run under AddressSanitizer to check that nothing reads out of bounds).
TEST_F(WeightsTest, EveryTruncationAndHeaderByteFlipIsSafe) {
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.AddBf16("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.AddF8Bits("b", {2, 2}, {kF8One, kF8Two, kF8Max, kF8NaN});
  w.AddF32("b_scale_inv", {1, 1}, {0.5f});
  w.AddF16Bits("c", {1}, {kF16One});
  const std::string bytes = w.Bytes();
  int opened = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    opened += OpenRaw(bytes.substr(0, n)).ok() ? 1 : 0;
  }
  EXPECT_EQ(opened, 0);  // the last tensor ends at the end of the file

  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | static_cast<uint8_t>(bytes[i]);
  const size_t header_end = 8 + header_length;
  ASSERT_LE(header_end, bytes.size());
  int still_valid = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (const char replacement : {'9', '"', '\xff'}) {
      std::string corrupt = bytes;
      if (corrupt[i] == replacement) continue;
      corrupt[i] = replacement;
      ASSERT_TRUE(WriteBytes(dir_.File("model.safetensors"), corrupt).ok());
      absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir_.path());
      if (!c.ok()) continue;
      // Whatever still parses must load within bounds.
      ++still_valid;
      WeightLoader loader(c->get(), &backend_);
      for (const auto& [name, t] : (*c)->tensors()) {
        (void)loader.LoadF32(name, t.shape);
      }
    }
  }
  EXPECT_GT(still_valid, 0);  // e.g. flips inside the metadata strings
}

}  // namespace
}  // namespace mlaserve
