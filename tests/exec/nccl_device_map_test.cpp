// --device-map parsing and the device-count check of the NCCL backend (device-free).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nccl/nccl_device.hpp"
#include "pipewright/exec/device_map.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

std::string config_error(const std::string& spec, int local_world_size) {
  try {
    (void)parse_device_map(spec, local_world_size);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for '" << spec << "'";
  return "";
}

TEST(DeviceMap, EmptySpecIsIdentityForEveryWorldSize) {
  for (int n = 1; n <= 8; ++n) {
    const std::vector<int> devices = parse_device_map("", n);
    ASSERT_EQ(devices.size(), static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(devices[static_cast<std::size_t>(r)], r);
  }
  EXPECT_EQ(parse_device_map("  ", 2), (std::vector<int>{0, 1}));
}

TEST(DeviceMap, ListForm) {
  EXPECT_EQ(parse_device_map("0,1,2,3", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_device_map("3,2,1,0", 4), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(parse_device_map(" 4 , 6 ", 2), (std::vector<int>{4, 6}));
  EXPECT_EQ(parse_device_map("7", 1), (std::vector<int>{7}));
}

TEST(DeviceMap, PairForm) {
  EXPECT_EQ(parse_device_map("0:2,1:3", 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(parse_device_map("1:0, 0:1", 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(parse_device_map("2:5,0:4,1:7", 3), (std::vector<int>{4, 7, 5}));
}

TEST(DeviceMap, ErrorsNameTheProblemAndColumn) {
  EXPECT_NE(config_error("0,x", 2).find("device 'x' at column 3 is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(config_error("0,-1", 2).find("'-1' at column 3"), std::string::npos);
  EXPECT_NE(config_error("0,1,2", 2).find("lists 3 devices but this node has 2 local ranks"),
            std::string::npos);
  EXPECT_NE(config_error("0,", 2).find("empty device at column 3"), std::string::npos);
  EXPECT_NE(config_error("0:1,0:2", 2).find("local rank 0 is listed twice (columns 1 and 5)"),
            std::string::npos);
  EXPECT_NE(config_error("0:1", 2).find("local rank 1 has no device"), std::string::npos);
  EXPECT_NE(config_error("0:1,5:2", 2).find("local rank 5 at column 5 is out of range"),
            std::string::npos);
  EXPECT_NE(config_error("0:1,2", 2).find("entry '2' at column 5 is not local_rank:device"),
            std::string::npos);
  EXPECT_NE(config_error("0:1:2", 1).find("more than one ':'"), std::string::npos);
  EXPECT_NE(config_error("1,1", 2).find("local ranks 0 and 1 both use CUDA device 1"),
            std::string::npos);
  EXPECT_NE(config_error("99999999999", 1).find("too large"), std::string::npos);
  EXPECT_THROW((void)parse_device_map("", 0), ConfigError);
}

TEST(DeviceMap, EveryErrorIsAConfigErrorSoTheCliExitsTwo) {
  for (const char* spec : {"a", "0,,1", "0:", ":1", "0;1", "1.5", "0:1,1:1"}) {
    try {
      (void)parse_device_map(spec, 2);
      ADD_FAILURE() << spec;
    } catch (const std::exception& e) {
      EXPECT_EQ(exit_code_for(e), 2) << spec << ": " << e.what();
    }
  }
}

TEST(ResolveDevice, DefaultIsLocalRankWhenEnoughDevices) {
  for (int n = 1; n <= 4; ++n) {
    for (int r = 0; r < n; ++r) EXPECT_EQ(resolve_device("", r, n, n), r);
  }
  EXPECT_EQ(resolve_device("", 1, 2, 8), 1);
  EXPECT_EQ(resolve_device("0:3,1:2", 0, 2, 4), 3);
}

TEST(ResolveDevice, TooFewDevicesNamesNeededAndFound) {
  try {
    (void)resolve_device("", 0, 2, 0, "cudaGetDeviceCount: cudaErrorNoDevice");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--backend nccl needs 2 CUDA devices on this node for 2 local ranks; found 0 "
                 "(cudaGetDeviceCount: cudaErrorNoDevice)");
  }
  try {
    (void)resolve_device("", 3, 4, 2);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--backend nccl needs 4 CUDA devices on this node for 4 local ranks; found 2");
  }
}

TEST(ResolveDevice, MappedDeviceOutOfRange) {
  try {
    (void)resolve_device("0:5,1:1", 0, 2, 2);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--device-map maps local rank 0 to CUDA device 5; this node has 2 (0..1)");
  }
  // Rank 1's own device exists, but every rank validates the whole map and fails alike.
  EXPECT_THROW((void)resolve_device("0:5,1:1", 1, 2, 2), ConfigError);
  EXPECT_THROW((void)resolve_device("", 2, 2, 2), ConfigError);
}

TEST(ResolveDevice, ParsedMapAsInCommOptions) {
  EXPECT_EQ(resolve_device(std::vector<int>{}, 1, 2, 2), 1);
  EXPECT_EQ(resolve_device(std::vector<int>{3, 1}, 0, 2, 4), 3);
  EXPECT_THROW((void)resolve_device(std::vector<int>{1, 1}, 0, 2, 4), ConfigError);  // shared
  EXPECT_THROW((void)resolve_device(std::vector<int>{0}, 0, 2, 4), ConfigError);     // too short
  EXPECT_THROW((void)resolve_device(std::vector<int>{0, 4}, 0, 2, 4), ConfigError);  // no device 4
  try {
    (void)resolve_device(std::vector<int>{}, 0, 1, 0, "cudaErrorInsufficientDriver");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--backend nccl needs 1 CUDA device on this node for 1 local rank; found 0 "
                 "(cudaErrorInsufficientDriver)");
  }
}

// Note [bf16 device check]: capability 8.0 and newer compute in bfloat16 (as
// torch.cuda.is_bf16_supported() says); older devices are refused naming what was found.
TEST(Bf16DeviceCheck, AllowsCapabilityEightAndNewerOnly) {
  EXPECT_EQ(bf16_capability_refusal(0, {8, 0}), "");
  EXPECT_EQ(bf16_capability_refusal(0, {8, 6}), "");
  EXPECT_EQ(bf16_capability_refusal(0, {9, 0}), "");
  EXPECT_EQ(bf16_capability_refusal(0, {10, 0}), "");
  EXPECT_EQ(bf16_capability_refusal(3, {7, 5}),
            "--precision bf16: CUDA device 3 has compute capability 7.5; bfloat16 needs 8.0 or "
            "newer (Ampere); use --precision fp16 or fp32");
  EXPECT_NE(bf16_capability_refusal(0, {7, 0}), "");
  EXPECT_NE(bf16_capability_refusal(0, {6, 1}), "");
}

// Without a device (or without the CUDA toolkit) the runtime's answer is "unknown" with a reason,
// never a made-up capability; with one it is a real capability.
TEST(Bf16DeviceCheck, CapabilityIsUnknownWithAReasonOrReal) {
  std::string why;
  const auto cc = cuda_compute_capability(0, &why);
  if (cc) {
    EXPECT_GE(cc->major, 1);
  } else {
    EXPECT_FALSE(why.empty());
  }
}

}  // namespace
}  // namespace pipewright::exec
