#include "pipewright/graph/hostlist.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> expand(const std::string& e) { return expand_hostlist(e, "NODELIST"); }

TEST(Hostlist, PlainNamesAndLists) {
  EXPECT_THAT(expand("login1"), ElementsAre("login1"));
  EXPECT_THAT(expand("a,b,c"), ElementsAre("a", "b", "c"));
}

TEST(Hostlist, RangesKeepZeroPadding) {
  EXPECT_THAT(expand("node[01-04,07]"),
              ElementsAre("node01", "node02", "node03", "node04", "node07"));
  EXPECT_THAT(expand("n[8-11]"), ElementsAre("n8", "n9", "n10", "n11"));
  EXPECT_THAT(expand("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
}

TEST(Hostlist, SeveralGroupsPrefixesAndSuffixes) {
  EXPECT_THAT(expand("gpu[1-2]-ib,login[3],x"), ElementsAre("gpu1-ib", "gpu2-ib", "login3", "x"));
  EXPECT_THAT(expand("rack[1-2]-n[1-2].lan"),
              ElementsAre("rack1-n1.lan", "rack1-n2.lan", "rack2-n1.lan", "rack2-n2.lan"));
  EXPECT_THAT(expand("a[1-2],b[5,7]c"), ElementsAre("a1", "a2", "b5c", "b7c"));
}

TEST(Hostlist, BadExpressionsNameTheSource) {
  for (const char* bad : {"", "node[1-2", "node1-2]", "n[[1]]", "n[a-b]", "n[3-1]", "a,,b", "n[]",
                          "n[1-]", "n[0-99999999]"}) {
    try {
      (void)expand(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("NODELIST")) << bad;
    }
  }
}

TEST(Hostlist, TaskCounts) {
  EXPECT_THAT(expand_task_counts("2(x3),1", "T"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(expand_task_counts("4", "T"), ElementsAre(4));
  for (const char* bad : {"", "2(x", "x", "0", "2(x0)", "2(3)"})
    EXPECT_THROW((void)expand_task_counts(bad, "T"), ConfigError) << bad;
}

}  // namespace
}  // namespace pipewright::graph
