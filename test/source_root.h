// Where a test finds the checkout's fixtures: $KILN_SOURCE_ROOT, which ctest
// sets for every test that reads them (KILN_TEST_ENVIRONMENT in the top
// CMakeLists.txt). No source path is compiled in, so a build folder copied
// to another root runs with whatever checkout it is given there; a test
// binary started without it fails every test up front, saying so.
#pragma once

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace kiln {

// checkoutPath("test/fixtures/tiny-llama") -> $KILN_SOURCE_ROOT/test/fixtures/tiny-llama
inline std::string checkoutPath(const std::string& relative) {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  return std::string(root && *root ? root : "$KILN_SOURCE_ROOT") + "/" + relative;
}

class CheckoutRootCheck : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* root = std::getenv("KILN_SOURCE_ROOT");
    if (!root || !*root)
      GTEST_FAIL() << "KILN_SOURCE_ROOT is not set: this test reads fixtures from the kiln checkout. Run it "
                      "through ctest, or set KILN_SOURCE_ROOT to the checkout's root.";
  }
};

inline ::testing::Environment* const kCheckoutRootCheck =
    ::testing::AddGlobalTestEnvironment(new CheckoutRootCheck);

}  // namespace kiln
