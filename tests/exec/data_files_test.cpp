// npy and safetensors files: round trips, byte-level fixtures, NumPy cross-checks (when
// /usr/bin/python3 has numpy), and rejection of bad files; datasets and microbatches.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "data/dataset.hpp"
#include "data/file_io.hpp"
#include "data/npy.hpp"
#include "data/safetensors.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "pw_data_XXXXXX";
    const char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string read_bytes(const std::string& path) { return read_file_bytes(path, "file"); }

bool python_has(const char* module) {
  const std::string cmd =
      std::string("/usr/bin/python3 -c 'import ") + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Runs a python3 snippet; returns its exit status.
int run_python(const std::string& code, const std::string& dir) {
  const std::string script = dir + "/script.py";
  write_bytes(script, code);
  return std::system(("/usr/bin/python3 '" + script + "' >'" + dir + "/py.log' 2>&1").c_str());
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ParseError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// An npy v1 file by hand: magic, version, header length, header, data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t width = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < width; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string out;
  for (const T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

TEST(Npy, RoundTripsEveryVersion) {
  TempDir dir;
  NpyArray f;
  f.type = NpyType::kFloat32;
  f.shape = {2, 3};
  f.f32 = {1.5f, -2.f, 3.25f, 0.f, 1e-7f, -1e7f};
  NpyArray i;
  i.type = NpyType::kInt64;
  i.shape = {4};
  i.i64 = {-1, 0, 1LL << 40, 7};
  for (const int version : {1, 2, 3}) {
    for (const NpyArray* a : {&f, &i}) {
      const std::string path = dir.file("a" + std::to_string(version) + ".npy");
      save_npy(path, *a, version);
      const NpyArray b = load_npy(path);
      EXPECT_EQ(b.type, a->type);
      EXPECT_EQ(b.shape, a->shape);
      EXPECT_EQ(b.f32, a->f32);
      EXPECT_EQ(b.i64, a->i64);
      // NumPy's alignment rule: the data start at a multiple of 64 bytes.
      EXPECT_EQ(
          (read_bytes(path).size() - a->numel() * 4 * (a->type == NpyType::kInt64 ? 2 : 1)) % 64,
          0u);
    }
  }
}

TEST(Npy, HandWrittenFixturesConvertDtypes) {
  const NpyArray f8 =
      parse_npy(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                          raw<double>({0.5, -1.0, 3.0})),
                "f8.npy");
  EXPECT_EQ(f8.type, NpyType::kFloat32);
  EXPECT_EQ(f8.f32, (std::vector<float>{0.5f, -1.f, 3.f}));
  const NpyArray i4 =
      parse_npy(npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                          raw<std::int32_t>({1, -2, 3, 2147483647})),
                "i4.npy");
  EXPECT_EQ(i4.type, NpyType::kInt64);
  EXPECT_EQ(i4.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(i4.i64, (std::vector<std::int64_t>{1, -2, 3, 2147483647}));
  // Key order, double quotes and a version 2 header are all valid.
  const NpyArray v2 =
      parse_npy(npy_bytes("{\"shape\": (1,), \"fortran_order\": False, \"descr\": \"<i8\"}",
                          raw<std::int64_t>({9}), 2),
                "v2.npy");
  EXPECT_EQ(v2.i64, (std::vector<std::int64_t>{9}));
  const NpyArray empty = parse_npy(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", ""), "empty.npy");
  EXPECT_EQ(empty.rows(), 0);
}

TEST(Npy, BadFilesNameFileAndField) {
  const auto bad = [](const std::string& dict, const std::string& data) {
    return error_of([&] { static_cast<void>(parse_npy(npy_bytes(dict, data), "bad.npy")); });
  };
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", raw<float>({1, 2}))
                .find("bad.npy: npy header field 'fortran_order'"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", raw<float>({1, 2}))
                .find("'descr': big-endian"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", "abcd")
                .find("unsupported dtype '<f2'"),
            std::string::npos);
  EXPECT_NE(
      bad("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", raw<float>({1, 2}))
          .find("'descr': structured"),
      std::string::npos);
  EXPECT_NE(
      bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", raw<float>({1, 2}))
          .find("'shape': expected a 1-D or 2-D"),
      std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", raw<float>({1, 2}))
                .find("truncated"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", raw<float>({1, 2}))
                .find("trailing"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, }", raw<float>({1})).find("no 'shape'"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", raw<float>({1}))
                .find("unexpected key 'x'"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4' 'fortran_order': False}", "").find("expected ',' or '}'"),
            std::string::npos);
  EXPECT_NE(bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "")
                .find("too large"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              static_cast<void>(parse_npy("PK\x03\x04 zip file", "x.npy"));
            }).find("x.npy: not an npy file"),
            std::string::npos);
  std::string v9 = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", "");
  v9[6] = 9;
  EXPECT_NE(error_of([&] { static_cast<void>(parse_npy(v9, "v.npy")); }).find("version 9"),
            std::string::npos);
  std::string cut = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", "");
  EXPECT_NE(error_of([&] {
              static_cast<void>(parse_npy(cut.substr(0, 40), "c.npy"));
            }).find("truncated npy header"),
            std::string::npos);
  EXPECT_THROW(static_cast<void>(load_npy("/nonexistent/x.npy")), ConfigError);
}

TEST(Npy, CrossChecksWithNumpy) {
  if (!python_has("numpy")) GTEST_SKIP() << "/usr/bin/python3 has no numpy";
  TempDir dir;
  const std::string d = dir.file("");
  ASSERT_EQ(
      run_python(
          "import numpy as np\n"
          "d = '" +
              d +
              "'\n"
              "np.save(d + 'f4.npy', np.arange(12, dtype=np.float32).reshape(3, 4) / 4)\n"
              "np.save(d + 'f8.npy', np.array([[0.1, -2.5], [1e30, 3.0]]))\n"
              "np.save(d + 'i4.npy', np.array([5, -6, 7], dtype=np.int32))\n"
              "np.save(d + 'i8.npy', np.array([[1 << 40], [-3]], dtype=np.int64))\n"
              "np.save(d + 'fortran.npy', np.asfortranarray(np.ones((2, 3), np.float32)))\n"
              "np.save(d + 'big.npy', np.ones(3, dtype='>f4'))\n"
              "np.save(d + 'u8.npy', np.ones(3, dtype=np.uint8))\n"
              "np.save(d + 'd3.npy', np.ones((2, 2, 2), np.float32))\n"
              "with open(d + 'v2.npy', 'wb') as f:\n"
              "    np.lib.format.write_array(f, np.array([1.0, 2.0], np.float32), version=(2, 0))\n"
              "with open(d + 'v3.npy', 'wb') as f:\n"
              "    np.lib.format.write_array(f, np.array([3, 4], np.int64), version=(3, 0))\n",
          d),
      0)
      << read_bytes(d + "py.log");
  const NpyArray f4 = load_npy(d + "f4.npy");
  EXPECT_EQ(f4.shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(f4.f32[5], 1.25f);
  const NpyArray f8 = load_npy(d + "f8.npy");
  EXPECT_EQ(f8.f32, (std::vector<float>{0.1f, -2.5f, 1e30f, 3.f}));
  EXPECT_EQ(load_npy(d + "i4.npy").i64, (std::vector<std::int64_t>{5, -6, 7}));
  EXPECT_EQ(load_npy(d + "i8.npy").i64, (std::vector<std::int64_t>{1LL << 40, -3}));
  EXPECT_EQ(load_npy(d + "v2.npy").f32, (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(load_npy(d + "v3.npy").i64, (std::vector<std::int64_t>{3, 4}));
  EXPECT_NE(error_of([&] { static_cast<void>(load_npy(d + "fortran.npy")); }).find("fortran_order"),
            std::string::npos);
  EXPECT_NE(error_of([&] { static_cast<void>(load_npy(d + "big.npy")); }).find("big-endian"),
            std::string::npos);
  EXPECT_NE(error_of([&] { static_cast<void>(load_npy(d + "u8.npy")); }).find("'|u1'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { static_cast<void>(load_npy(d + "d3.npy")); }).find("1-D or 2-D"),
            std::string::npos);

  // And NumPy reads what we write, in every version.
  NpyArray a;
  a.shape = {2, 2};
  a.f32 = {1.f, 2.5f, -3.f, 4.f};
  save_npy(d + "ours1.npy", a, 1);
  save_npy(d + "ours3.npy", a, 3);
  NpyArray b;
  b.type = NpyType::kInt64;
  b.shape = {3};
  b.i64 = {7, 8, -9};
  save_npy(d + "ours2.npy", b, 2);
  EXPECT_EQ(run_python("import numpy as np\n"
                       "d = '" +
                           d +
                           "'\n"
                           "for v in ('1', '3'):\n"
                           "    x = np.load(d + 'ours' + v + '.npy')\n"
                           "    assert x.dtype == np.float32 and x.shape == (2, 2), x\n"
                           "    assert (x == np.array([[1, 2.5], [-3, 4]])).all(), x\n"
                           "y = np.load(d + 'ours2.npy')\n"
                           "assert y.dtype == np.int64 and list(y) == [7, 8, -9], y\n",
                       d),
            0)
      << read_bytes(d + "py.log");
}

// The byte layout of a small file, written out by hand from the format description.
std::string safetensors_fixture() {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("idx":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}})";
  std::string padded = header;
  while (padded.size() % 8 != 0) padded += ' ';
  std::string out = raw<std::uint64_t>({padded.size()});
  return out + padded + raw<float>({1.5f, -2.f}) + raw<std::int64_t>({7});
}

TEST(Safetensors, ReadsAndWritesTheByteLayout) {
  std::map<std::string, std::string> meta;
  const auto t = parse_safetensors(safetensors_fixture(), "fixture.safetensors", &meta);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(t.at("w").scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(t.at("w"), torch::tensor({1.5f, -2.f})));
  EXPECT_EQ(t.at("idx").sizes(), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(t.at("idx").item<std::int64_t>(), 7);
  // Our writer produces exactly these bytes (names in the given order, 8-byte padding).
  EXPECT_EQ(serialize_safetensors({{"w", t.at("w")}, {"idx", t.at("idx")}}, {{"format", "pt"}}),
            safetensors_fixture());
}

TEST(Safetensors, RoundTripsDtypesAndNonContiguousTensors) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, torch::Tensor>> in = {
      {"0.weight", torch::randn({3, 4})},
      {"0.bias", torch::randn({4}, torch::kDouble)},
      {"ids", torch::arange(6, torch::kLong).reshape({2, 3}).t()},  // non-contiguous
      {"i32", torch::tensor({1, -2}, torch::kInt)},
      {"h", torch::randn({2}).to(torch::kHalf)},
      {"bf", torch::randn({2}).to(torch::kBFloat16)},
      {"mask", torch::tensor({true, false})},
      {"scalar", torch::tensor(3.5f)},
      {"empty", torch::zeros({0, 3})},
  };
  save_safetensors(path, in, {{"step", "5"}});
  const auto out = load_safetensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_EQ(out.count(name), 1u) << name;
    EXPECT_EQ(out.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(out.at(name), t)) << name;
  }
  std::map<std::string, std::string> meta;
  static_cast<void>(parse_safetensors(read_bytes(path), path, &meta));
  EXPECT_EQ(meta.at("step"), "5");
  EXPECT_THROW(static_cast<void>(
                   serialize_safetensors({{"a", torch::zeros({1})}, {"a", torch::zeros({1})}})),
               ConfigError);
  EXPECT_THROW(
      static_cast<void>(serialize_safetensors({{"c", torch::zeros({1}, torch::kComplexFloat)}})),
      ConfigError);
}

TEST(Safetensors, BadFilesNameFileAndField) {
  const auto bad = [](const std::string& header, const std::string& data) {
    const std::string bytes = raw<std::uint64_t>({header.size()}) + header + data;
    return error_of([&] { static_cast<void>(parse_safetensors(bytes, "m.safetensors")); });
  };
  EXPECT_NE(bad(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd")
                .find("m.safetensors: /w/data_offsets: [0, 4] spans 4 bytes"),
            std::string::npos);
  EXPECT_NE(bad(R"({"w":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}})", "abcd")
                .find("/w/dtype: unsupported dtype 'X9'"),
            std::string::npos);
  EXPECT_NE(
      bad(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd").find("/w/shape/0"),
      std::string::npos);
  EXPECT_NE(bad(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd").find("/w/data_offsets: missing"),
            std::string::npos);
  EXPECT_NE(
      bad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcdefgh").find("trailing"),
      std::string::npos);
  EXPECT_NE(
      bad(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd").find("truncated"),
      std::string::npos);
  EXPECT_NE(bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                "abcdef")
                .find("/b/data_offsets: starts at 2 but the previous tensor ends at 4 (overlap)"),
            std::string::npos);
  EXPECT_NE(bad(R"({"a/b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "abcdefgh")
                .find("/a~1b/data_offsets: starts at 4 but the previous tensor ends at 0 (gap)"),
            std::string::npos);
  EXPECT_NE(bad(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "abcd")
                .find("/w/x: unexpected key"),
            std::string::npos);
  EXPECT_NE(bad(R"({"__metadata__":{"k":1}})", "").find("/__metadata__/k: expected a string"),
            std::string::npos);
  EXPECT_NE(bad("[1, 2]", "").find("header must be a JSON object"), std::string::npos);
  EXPECT_NE(bad("{\"w\":", "").find("(header):1:6: invalid JSON"), std::string::npos);
  EXPECT_NE(bad(R"({"__metadata__":{},"__metadata__":{}})", "").find("duplicate key"),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        static_cast<void>(parse_safetensors(raw<std::uint64_t>({1000}) + "{}", "big.safetensors"));
      }).find("big.safetensors: header size 1000 exceeds the file"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              static_cast<void>(parse_safetensors("abc", "s.safetensors"));
            }).find("not a safetensors file"),
            std::string::npos);
  EXPECT_THROW(static_cast<void>(load_safetensors("/nonexistent/w.safetensors")), ConfigError);
}

TEST(Safetensors, CrossChecksWithPythonSafetensors) {
  if (!python_has("safetensors")) {
    GTEST_SKIP() << "python3 safetensors not installed; ReadsAndWritesTheByteLayout checks the "
                    "format with a hand-written fixture";
  }
  TempDir dir;
  const std::string d = dir.file("");
  save_safetensors(d + "ours.safetensors",
                   {{"0.weight", torch::arange(6, torch::kFloat).reshape({2, 3})},
                    {"ids", torch::tensor({4, 5}, torch::kLong)}});
  ASSERT_EQ(
      run_python(
          "from safetensors.numpy import load_file, save_file\n"
          "import numpy as np\n"
          "d = '" +
              d +
              "'\n"
              "t = load_file(d + 'ours.safetensors')\n"
              "assert (t['0.weight'] == np.arange(6, dtype=np.float32).reshape(2, 3)).all()\n"
              "assert list(t['ids']) == [4, 5]\n"
              "save_file({'b': np.array([1.5, 2.5], np.float64), 'a': np.eye(2, dtype=np.int32)},"
              " d + 'theirs.safetensors')\n",
          d),
      0)
      << read_bytes(d + "py.log");
  const auto t = load_safetensors(d + "theirs.safetensors");
  EXPECT_TRUE(torch::equal(t.at("b"), torch::tensor({1.5, 2.5}, torch::kDouble)));
  EXPECT_TRUE(torch::equal(t.at("a"), torch::eye(2, torch::kInt)));
}

TEST(AtomicWrite, NeverLeavesPartialFiles) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  EXPECT_EQ(read_bytes(path), "second");
  EXPECT_THROW(write_file_atomically(dir.file("missing/out.bin"), "x"), ConfigError);
  // No temporary files remain next to the output.
  const std::string listing = dir.file("ls.txt");
  std::system(("ls -A '" + dir.file("") + "' > '" + listing + "'").c_str());
  EXPECT_EQ(read_bytes(listing), "ls.txt\nout.bin\n");
}

TEST(Dataset, NpyRowsAndBatches) {
  TempDir dir;
  NpyArray x;
  x.shape = {5, 2};
  x.f32 = {0, 1, 10, 11, 20, 21, 30, 31, 40, 41};
  NpyArray y;
  y.type = NpyType::kInt64;
  y.shape = {5};
  y.i64 = {0, 1, 2, 1, 0};
  save_npy(dir.file("x.npy"), x);
  save_npy(dir.file("y.npy"), y);
  const auto ds = load_npy_dataset(dir.file("x.npy"), dir.file("y.npy"));
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->x_type(), (ValueType{false, {2}}));
  EXPECT_EQ(ds->y_type(), (ValueType{true, {}}));
  EXPECT_EQ(ds->y_range()->hi, 2);
  const auto [bx, by] = make_batch(*ds, {3, 0, 3});
  EXPECT_TRUE(torch::equal(bx, torch::tensor({30.f, 31.f, 0.f, 1.f, 30.f, 31.f}).reshape({3, 2})));
  EXPECT_TRUE(torch::equal(by, torch::tensor({1, 0, 1}, torch::kLong)));
  EXPECT_THROW(static_cast<void>(make_batch(*ds, {5})), ConfigError);
  EXPECT_THROW(static_cast<void>(make_batch(*ds, {})), ConfigError);

  NpyArray y4 = y;
  y4.shape = {4};
  y4.i64.pop_back();
  save_npy(dir.file("y4.npy"), y4);
  try {
    static_cast<void>(load_npy_dataset(dir.file("x.npy"), dir.file("y4.npy")));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has 5 rows but data y"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("y4.npy' has 4"), std::string::npos) << e.what();
  }
  try {
    static_cast<void>(load_npy_dataset(dir.file("nope.npy"), dir.file("y.npy")));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.npy"), std::string::npos) << e.what();
  }
}

TEST(Dataset, CharWindowsAreNextCharacterTargets) {
  const CharLmDataset ds("abcabd", 3, "tiny");
  EXPECT_EQ(ds.vocab(), "abcd");
  EXPECT_EQ(ds.size(), 3);  // windows "abca", "bcab", "cabd"
  EXPECT_EQ(ds.x_type(), (ValueType{true, {3}}));
  const auto [x, y] = make_batch(ds, {2, 0});
  EXPECT_TRUE(torch::equal(x, torch::tensor({2, 0, 1, 0, 1, 2}, torch::kLong).reshape({2, 3})));
  EXPECT_TRUE(torch::equal(y, torch::tensor({0, 1, 3, 1, 2, 0}, torch::kLong).reshape({2, 3})));
  EXPECT_EQ(ds.decode({2, 0, 1}), "cab");
  EXPECT_EQ(ds.encode("dab"), (std::vector<std::int64_t>{3, 0, 1}));
  EXPECT_THROW(static_cast<void>(ds.encode("z")), ConfigError);
  EXPECT_THROW(static_cast<void>(make_batch(ds, {3})), ConfigError);
  EXPECT_THROW(CharLmDataset("abc", 3, "short"), ConfigError);
  EXPECT_THROW(CharLmDataset("abcdef", 0, "zero"), ConfigError);
}

TEST(Dataset, BundledSonnets) {
  EXPECT_EQ(bundled_dataset_names(), (std::vector<std::string>{"sonnets"}));
  const auto ds = load_bundled_dataset("sonnets", 64);
  // The compiled-in bytes are the shipped file's bytes.
  EXPECT_EQ(ds->text(), read_bytes(std::string(PIPEWRIGHT_EXAMPLES_DIR) + "/data/sonnets.txt"));
  EXPECT_GT(ds->text().size(), 20000u);
  EXPECT_EQ(ds->size(), static_cast<std::int64_t>(ds->text().size()) - 64);
  EXPECT_EQ(ds->vocab_size(), 59);
  EXPECT_EQ(ds->decode(ds->encode("Shall I compare thee")), "Shall I compare thee");
  const auto [x, y] = make_batch(*ds, {ds->size() - 1});
  EXPECT_EQ(ds->decode(std::vector<std::int64_t>(y.data_ptr<std::int64_t>(),
                                                 y.data_ptr<std::int64_t>() + 64)),
            ds->text().substr(ds->text().size() - 64));
  try {
    static_cast<void>(load_bundled_dataset("shakespeare", 8));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dataset 'shakespeare' (bundled: sonnets)"),
              std::string::npos);
  }
}

TEST(Dataset, SplitMicrobatches) {
  const torch::Tensor x = torch::arange(12, torch::kFloat).reshape({6, 2});
  const torch::Tensor y = torch::arange(6, torch::kLong);
  const auto parts = split_microbatches(x, y, 3);
  ASSERT_EQ(parts.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(torch::equal(parts[i].first, x.slice(0, 2 * i, 2 * i + 2)));
    EXPECT_TRUE(torch::equal(parts[i].second, y.slice(0, 2 * i, 2 * i + 2)));
  }
  EXPECT_EQ(split_microbatches(x, y, 1).size(), 1u);
  try {
    static_cast<void>(split_microbatches(x, y, 4));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("batch size 6 is not divisible by 4 microbatches"),
              std::string::npos);
  }
  EXPECT_THROW(static_cast<void>(split_microbatches(x, y, 0)), ConfigError);
  EXPECT_THROW(static_cast<void>(split_microbatches(x, y.slice(0, 0, 5), 1)), ConfigError);
}

graph::Model char_gpt(std::int64_t vocab, std::int64_t seq) {
  graph::Model m;
  m.name = "chargpt";
  m.input = {"int64", {seq}};
  graph::Node e;
  e.name = "embed";
  e.kind = graph::NodeKind::kEmbedding;
  e.params = {{"num_embeddings", vocab}, {"embedding_dim", 8}, {"max_positions", seq}};
  graph::Node head;
  head.name = "head";
  head.kind = graph::NodeKind::kLinear;
  head.params = {{"in_features", 8}, {"out_features", vocab}, {"bias", 0}};
  m.nodes = {e, head};
  m.edges = {graph::ModelEdge{0, 0, 1, 0}};
  return m;
}

TEST(Dataset, CheckAgainstModelCoversValueRanges) {
  const CharLmDataset ds("abcabd", 3, "tiny");
  EXPECT_NO_THROW(check_dataset_matches_model(ds, char_gpt(4, 3), LossKind::kCrossEntropy));
  try {
    check_dataset_matches_model(ds, char_gpt(3, 3), LossKind::kCrossEntropy);
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("token ids in [0, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_embeddings 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_dataset_matches_model(ds, char_gpt(4, 2), LossKind::kCrossEntropy),
               ConfigError);
  EXPECT_THROW(check_dataset_matches_model(ds, char_gpt(4, 3), LossKind::kMse), ConfigError);
  // Class labels beyond the classifier's outputs.
  const ArrayDataset labels(torch::zeros({2, 8}), torch::tensor({0, 5}, torch::kLong), "'x.npy'",
                            "'y.npy'");
  graph::Model clf;
  clf.name = "clf";
  clf.input = {"float32", {8}};
  graph::Node lin;
  lin.name = "fc";
  lin.kind = graph::NodeKind::kLinear;
  lin.params = {{"in_features", 8}, {"out_features", 5}};
  clf.nodes = {lin};
  try {
    check_dataset_matches_model(labels, clf, LossKind::kCrossEntropy);
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'y.npy' has class ids in [0, 5]"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("predicts 5 classes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipewright::exec
