#include "pipewright/graph/json_reader.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>

#include "pipewright/graph/error.hpp"

namespace pipewright::json {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

template <typename E = ParseError>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(JsonReader, LineColumnCountsFromOne) {
  EXPECT_EQ(line_col("ab\ncd", 0), "1:1");
  EXPECT_EQ(line_col("ab\ncd", 4), "2:2");
  EXPECT_EQ(line_col("ab", 99), "1:3");  // clamped to the end
}

TEST(JsonReader, LocatorFindsValuesByPointer) {
  const std::string text = "{\"a\": [1, {\"b/c\": 2, \"d~e\": [3]}], \"f\": 4}";
  const Locator loc(text);
  EXPECT_EQ(loc.find(""), 0u);
  EXPECT_EQ(text.substr(loc.find("/a/1/b~1c"), 1), "2");
  EXPECT_EQ(text.substr(loc.find("/a/1/d~0e/0"), 1), "3");
  EXPECT_EQ(text.substr(loc.find("/f"), 1), "4");
  // A missing member: the closest enclosing value.
  EXPECT_EQ(text.substr(loc.find("/a/1/zzz"), 1), "{");
  const auto offsets = Locator("{\"x\": [[1, 22], [], [333]]}").nested_element_offsets("/x");
  ASSERT_EQ(offsets.size(), 3u);
  EXPECT_EQ(offsets[0], (std::vector<std::size_t>{8, 11}));
  EXPECT_TRUE(offsets[1].empty());
  EXPECT_EQ(offsets[2], (std::vector<std::size_t>{21}));
}

TEST(JsonReader, FieldErrorsNameFileLineColumnAndPointer) {
  const std::string text = "{\n  \"a\": {\"b\": -1},\n  \"c\": \"x\"\n}\n";
  const Document doc = parse_strict(text, "f.json");
  const At root{doc.root, doc.source, ""};
  EXPECT_EQ(message_of([&] { (void)root["a"]["b"].as_finite_nonnegative(); }),
            "f.json:2:14: at /a/b: must be a finite number >= 0, got -1");
  EXPECT_EQ(message_of([&] { (void)root["c"].as_int(); }),
            "f.json:3:8: at /c: expected an integer, got string");
  EXPECT_EQ(message_of([&] { (void)root["missing"]; }),
            "f.json:1:1: at (root): missing required field \"missing\"");
  EXPECT_EQ(message_of([&] { root.only_keys({"a"}); }),
            "f.json:3:8: at /c: unknown field \"c\" (known fields: a)");
  EXPECT_EQ(message_of<InvalidGraphError>([&] { root["a"].fail_graph("bad"); }),
            "f.json:2:8: at /a: bad");
  // Without text (a value built in code): no position.
  const Json j = Json::parse("{\"n\": true}");
  const Source code{"code", ""};
  EXPECT_EQ(message_of([&] {
              (void)At{j, code, ""}["n"].as_string();
            }),
            "code at /n: expected a string, got boolean");
}

TEST(JsonReader, RejectsSyntaxErrorsDuplicatesDepthAndSize) {
  EXPECT_THAT(message_of([] { (void)parse_strict("{\n  \"a\": 1,\n  \"b\": ]\n}", "s.json"); }),
              AllOf(StartsWith("s.json:3:8: invalid JSON: "), HasSubstr("syntax error")));
  EXPECT_EQ(message_of([] { (void)parse_strict("{\"a\": 1,\n \"a\": 2}", "d.json"); }),
            "d.json:2:7: at /a: duplicate key \"a\"");
  EXPECT_EQ(message_of([] {
              (void)parse_strict("[[[[1]]]]", "n.json", {1000, 3});
            }),
            "n.json:1:4: at /0/0/0: nesting deeper than the limit of 3");
  EXPECT_NO_THROW((void)parse_strict("[[[1]]]", "n.json", {1000, 3}));
  EXPECT_EQ(message_of([] {
              (void)parse_strict("[1, 2, 3]", "b.json", {4, 32});
            }),
            "b.json: input is 9 bytes, more than the limit of 4");
  EXPECT_EQ(message_of([] { (void)parse_strict("[1e999]", "o.json"); }),
            "o.json:1:2: invalid JSON: number overflow parsing '1e999'");  // issue 20, item 6
}

TEST(JsonReader, ReadsFilesWithinTheLimit) {
  char dir_template[] = "/tmp/pw_json_reader_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/in.json";
  {
    std::ofstream out(path);
    out << "{\"a\": 1}";
  }
  EXPECT_EQ(read_text_file(path, "test file", 100), "{\"a\": 1}");
  // The size is checked before reading.
  EXPECT_EQ(message_of([&] { (void)read_text_file(path, "test file", 4); }),
            path + ": file is 8 bytes, more than the limit of 4");
  EXPECT_THAT(
      message_of<InputError>([&] { (void)read_text_file(dir + "/no.json", "test file", 9); }),
      StartsWith(dir + "/no.json: cannot open the test file for reading: "));
  EXPECT_THAT(message_of<InputError>([&] { (void)read_text_file(dir, "test file", 9); }),
              HasSubstr("is a directory"));
  // Issue 20, item 7: a FIFO (no writer: it used to block forever) and a device that never
  // ends (/dev/zero: it used to be read up to the limit) are refused before reading.
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(message_of<InputError>([&] { (void)read_text_file(fifo, "test file", 100); }),
              HasSubstr("is a FIFO (pipe), not a regular file"));
  EXPECT_THAT(message_of<InputError>([&] { (void)read_text_file("/dev/zero", "test file", 100); }),
              HasSubstr("is a character device, not a regular file"));
  std::string text;
  const Document doc = load_strict(path, "test file", text);
  EXPECT_EQ(doc.root.at("a"), 1);
  EXPECT_EQ(doc.source.name, path);
  std::remove(fifo.c_str());
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace pipewright::json
