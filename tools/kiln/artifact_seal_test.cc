#include "tools/kiln/artifact_seal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

class ArtifactSealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("kiln_artifact_seal_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kernels");
    write("manifest.json", R"({"format": "kiln-artifact"})");
    write("kernels/add_w64.cu", "extern \"C\" __global__ void add_w64() {}");
    ASSERT_TRUE(sealArtifact(dir_, "model|flags").ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& relative, const std::string& text) {
    std::ofstream(dir_ / relative, std::ios::binary | std::ios::trunc) << text;
  }
  fs::path dir_;
};

TEST_F(ArtifactSealTest, AWholeArtifactPasses) { EXPECT_EQ(artifactProblem(dir_, "model|flags"), ""); }

TEST_F(ArtifactSealTest, EveryDamageIsNamed) {
  write("kernels/add_w64.cu", "extern \"C\" __global__ void add_w64() {");
  EXPECT_EQ(artifactProblem(dir_, "model|flags"), "kernels/add_w64.cu has 38 bytes, the seal records 39");
  write("kernels/add_w64.cu", "extern \"C\" __global__ void add_w64() {{");
  EXPECT_NE(artifactProblem(dir_, "model|flags").find("kernels/add_w64.cu hashes to "), std::string::npos);
  fs::remove(dir_ / "kernels/add_w64.cu");
  EXPECT_EQ(artifactProblem(dir_, "model|flags"), "kernels/add_w64.cu is missing or unreadable");
}

TEST_F(ArtifactSealTest, ASealOfAnotherKeyOrDamagedFails) {
  EXPECT_EQ(artifactProblem(dir_, "other|flags"),
            "artifact.kcache: written for key \"model|flags\", expected \"other|flags\"");
  const fs::path seal = dir_ / kArtifactSealName;
  fs::resize_file(seal, fs::file_size(seal) - 5);
  EXPECT_NE(artifactProblem(dir_, "model|flags").find("artifact.kcache: truncated"), std::string::npos);
  fs::remove(seal);
  EXPECT_EQ(artifactProblem(dir_, "model|flags"),
            "it has no artifact.kcache (not written whole, or by an older kiln)");
}

}  // namespace
}  // namespace kiln
