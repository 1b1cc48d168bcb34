#include "pipewright/graph/file_io.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "pipewright/graph/error.hpp"

namespace pipewright {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh folder per test, removed afterwards.
class WriteFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pw_file_io_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST_F(WriteFile, RegularFileIsReplacedAtomicallyWithNoTemporaryLeft) {
  const std::string path = file("out.json");
  write_file_atomically(path, "first");
  EXPECT_EQ(read(path), "first");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  write_file_atomically(path, "second");
  EXPECT_EQ(read(path), "second");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);  // the replaced file's mode is kept
  EXPECT_EQ(listing(), std::vector<std::string>{"out.json"});
}

TEST_F(WriteFile, SymlinkStaysALinkAndItsTargetIsWritten) {
  write_file_atomically(file("target.txt"), "old");
  fs::create_symlink("target.txt", file("link.txt"));  // relative to the link's folder
  write_file_atomically(file("link.txt"), "new");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(file("link.txt"))));
  EXPECT_EQ(read(file("target.txt")), "new");
  // A chain of links, the last one dangling: the final target is created.
  fs::create_directory(file("sub"));
  fs::create_symlink(file("sub/created.txt"), file("sub/dangling"));
  fs::create_symlink("sub/dangling", file("chain"));
  write_file_atomically(file("chain"), "made");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(file("chain"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(file("sub/dangling"))));
  EXPECT_EQ(read(file("sub/created.txt")), "made");
  EXPECT_EQ(listing(), (std::vector<std::string>{"chain", "link.txt", "sub", "target.txt"}));
}

TEST_F(WriteFile, SymlinkLoopIsAnError) {
  fs::create_symlink("b", file("a"));
  fs::create_symlink("a", file("b"));
  EXPECT_THROW(write_file_atomically(file("a"), "x"), ConfigError);
}

TEST_F(WriteFile, FifoIsWrittenDirectlyAndStaysAFifo) {
  const std::string path = file("pipe");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read(path); });
  write_file_atomically(path, "through the pipe");
  reader.join();
  EXPECT_EQ(received, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(path)));
  EXPECT_EQ(listing(), std::vector<std::string>{"pipe"});
}

// Never the real /dev/null: if the writer replaced it, the machine would break. A node of our own
// with the same device numbers (1, 3) behaves the same.
TEST_F(WriteFile, CharacterDeviceIsWrittenInPlaceNotReplaced) {
  const std::string path = file("null");
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot mknod a character device here (not root?)";
  }
  write_file_atomically(path, "discarded");
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(path)));
  // Through a symlink too: the link stays, the device stays.
  fs::create_symlink("null", file("to_null"));
  write_file_atomically(file("to_null"), "discarded");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(file("to_null"))));
  EXPECT_TRUE(fs::is_character_file(fs::symlink_status(path)));
  EXPECT_EQ(listing(), (std::vector<std::string>{"null", "to_null"}));
}

TEST_F(WriteFile, DirectoryIsAnErrorNamingThePath) {
  fs::create_directory(file("folder"));
  try {
    write_file_atomically(file("folder"), "x");
    FAIL() << "writing over a directory did not throw";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(file("folder")));
    EXPECT_THAT(e.what(), HasSubstr("is a directory"));
  }
  EXPECT_TRUE(fs::is_directory(file("folder")));
}

TEST_F(WriteFile, MissingFolderIsAnErrorNamingThePath) {
  const std::string path = file("missing/out.json");
  try {
    write_file_atomically(path, "x");
    FAIL() << "writing into a missing folder did not throw";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  EXPECT_EQ(listing(), std::vector<std::string>{});
  EXPECT_THROW(write_file_atomically("", "x"), ConfigError);
}

}  // namespace
}  // namespace pipewright
