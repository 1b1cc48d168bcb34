// Lazy .npy rows (npy_file.hpp, issue 24 item 5): a dataset reads only the rows of its batches
// (counted in bytes, no timing), converts dtypes as load_npy does, and a file truncated before or
// after it was opened gives an error naming the file (and the sample, when read lazily).
#include <gtest/gtest.h>
#include <torch/types.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include "data/dataset.hpp"
#include "data/npy.hpp"
#include "data/npy_file.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "pw_npy_file_" + std::to_string(::getpid()) + "_" + name;
}

NpyArray iota_f32(std::int64_t rows, std::int64_t cols) {
  NpyArray a;
  a.shape = {rows, cols};
  for (std::int64_t i = 0; i < rows * cols; ++i) a.f32.push_back(static_cast<float>(i) * 0.5F);
  return a;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no exception";
}

TEST(NpyFile, DatasetReadsOnlyTheRowsOfItsBatches) {
  const std::string xp = temp_file("x.npy");
  const std::string yp = temp_file("y.npy");
  const NpyArray x = iota_f32(1000, 16);  // 64 000 data bytes
  NpyArray y;
  y.type = NpyType::kInt64;
  y.shape = {1000};
  for (std::int64_t i = 0; i < 1000; ++i) y.i64.push_back(i % 7);
  save_npy(xp, x, 2);
  save_npy(yp, y);
  const auto ds = load_npy_dataset(xp, yp);
  // Opening reads headers (and scans int64 Y for its range, not counted): no rows yet.
  EXPECT_EQ(ds->bytes_read(), 0U);
  EXPECT_EQ(ds->y_range()->lo, 0);
  EXPECT_EQ(ds->y_range()->hi, 6);
  EXPECT_EQ(ds->x_type(), (ValueType{false, {16}}));
  EXPECT_EQ(ds->y_type(), (ValueType{true, {}}));
  const std::vector<std::int64_t> idx = {5, 6, 7, 999, 5};
  const auto [bx, by] = ds->batch(idx);
  EXPECT_EQ(ds->bytes_read(), 5U * (16 * 4 + 8));
  const auto full_x = torch::tensor(x.f32).reshape({1000, 16});
  const auto sel = torch::tensor(idx, torch::kLong);
  EXPECT_TRUE(torch::equal(bx, full_x.index_select(0, sel)));
  EXPECT_TRUE(torch::equal(by, torch::tensor(y.i64, torch::kLong).index_select(0, sel)));
  EXPECT_THROW(static_cast<void>(ds->batch({1000})), ConfigError);
  std::remove(xp.c_str());
  std::remove(yp.c_str());
}

TEST(NpyFile, ConvertsFloat64AndInt32RowsAsLoadNpy) {
  const std::string path = temp_file("conv.npy");
  // float64 [3, 2] and int32 [4], hand-written as NumPy would.
  auto write = [&](const std::string& descr, const std::string& shape, const std::string& data) {
    std::string dict =
        "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    dict.append(128 - 10 - 1 - dict.size(), ' ');
    dict.push_back('\n');
    std::string bytes = "\x93NUMPY\x01";
    bytes.push_back('\0');
    bytes.push_back(static_cast<char>(dict.size()));
    bytes.push_back('\0');
    bytes += dict + data;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  const double d[6] = {0.5, -1.25, 3.0, 4.5, 1e-3, 7.0};
  write("<f8", "(3, 2)", std::string(reinterpret_cast<const char*>(d), sizeof d));
  {
    const NpyFile f(path);
    float out[4] = {};
    f.read_rows({2, 0}, out);
    const NpyArray whole = load_npy(path);
    EXPECT_EQ(out[0], whole.f32[4]);
    EXPECT_EQ(out[1], whole.f32[5]);
    EXPECT_EQ(out[2], whole.f32[0]);
    EXPECT_EQ(out[3], whole.f32[1]);
    EXPECT_EQ(f.bytes_read(), 2U * 16);
  }
  const std::int32_t i[4] = {5, -6, 7, 1 << 30};
  write("<i4", "(4,)", std::string(reinterpret_cast<const char*>(i), sizeof i));
  const NpyFile f(path);
  std::int64_t out[3] = {};
  f.read_rows({1, 2, 3}, out);
  EXPECT_EQ(out[0], -6);
  EXPECT_EQ(out[2], 1 << 30);
  EXPECT_EQ(f.int_range()->first, -6);
  EXPECT_EQ(f.int_range()->second, 1 << 30);
  std::remove(path.c_str());
}

TEST(NpyFile, TruncatedFilesNameTheFileAndSample) {
  const std::string path = temp_file("cut.npy");
  save_npy(path, iota_f32(100, 8));
  // Cut before opening: the header check says so, as parse_npy does.
  ASSERT_EQ(::truncate(path.c_str(), 128 + 99 * 32), 0);
  std::string what = error_of([&] { NpyFile f(path); });
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_NE(what.find("truncated"), std::string::npos) << what;
  // Cut after opening (the file changed under a running job): the read of a lost row says which.
  save_npy(path, iota_f32(100, 8));
  const NpyFile f(path);
  ASSERT_EQ(::truncate(path.c_str(), 128 + 50 * 32), 0);
  float out[16] = {};
  f.read_rows({3, 4}, out);  // still there
  what = error_of([&] { f.read_rows({10, 70, 71}, out); });
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_NE(what.find("sample 70 to 71"), std::string::npos) << what;
  EXPECT_NE(what.find("the file is now 1728 bytes long"), std::string::npos) << what;
  EXPECT_THROW(f.read_rows({75}, out), ParseError);
  // Not an npy file at all.
  save_npy(path, iota_f32(1, 1));
  ASSERT_EQ(::truncate(path.c_str(), 5), 0);
  what = error_of([&] { NpyFile g(path); });
  EXPECT_NE(what.find("not an npy file"), std::string::npos) << what;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pipewright::exec
