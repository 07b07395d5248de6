// A fresh directory under $TMPDIR (or /tmp) removed with everything in it
// when the object dies, for tests that write model files.
#pragma once

#include <string>

namespace kiln::formats::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace kiln::formats::testing
