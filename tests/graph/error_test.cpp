#include <gtest/gtest.h>

#include "pipewright/graph/error.hpp"

namespace pipewright {
namespace {

TEST(Error, ExitCodesFollowTheHierarchy) {
  EXPECT_EQ(exit_code_for(ParseError("x")), 2);
  EXPECT_EQ(exit_code_for(InvalidGraphError("x")), 2);
  EXPECT_EQ(exit_code_for(InvalidPlanError("x")), 2);
  EXPECT_EQ(exit_code_for(ConfigError("x")), 2);
  EXPECT_EQ(exit_code_for(PeerError("x")), 3);
  EXPECT_EQ(exit_code_for(TimeoutError("x")), 4);
  EXPECT_EQ(exit_code_for(BackendError("x")), 1);
  EXPECT_EQ(exit_code_for(InternalError("x")), 1);
  EXPECT_EQ(exit_code_for(std::runtime_error("x")), 1);
}

TEST(Error, CheckThrowsTheNamedTypeWithTheMessage) {
  int n = -3;
  try {
    PW_CHECK(n > 0, ConfigError, "--stages must be > 0, got " << n);
    FAIL() << "PW_CHECK did not throw";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--stages must be > 0, got -3");
  }
  EXPECT_NO_THROW(PW_CHECK(n < 0, ConfigError, "unused"));
}

TEST(Error, AssertThrowsInternalErrorWithLocation) {
  try {
    PW_ASSERT(1 + 1 == 3, "arithmetic");
    FAIL() << "PW_ASSERT did not throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("error_test.cpp"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("arithmetic"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipewright
