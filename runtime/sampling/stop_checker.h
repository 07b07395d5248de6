// Stop-string detection over streamed text. Detokenized pieces arrive one
// token at a time, and a stop string may span several of them ("<|e" + "nd|>"),
// so text that could be the start of a stop string is held back until the
// next piece decides it. The released text never contains a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::sampling {

struct StopUpdate {
  std::string released;  // text that may be streamed to the client now
  bool stopped = false;  // a stop string matched; generation should end
  int stop_index = -1;   // which stop string matched (index into the list)
};

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop_strings);

  // Appends the next decoded piece. Holds back the longest suffix that is a
  // proper prefix of some stop string, and an unfinished UTF-8 sequence at the
  // end. On a match, releases the text before the earliest match (the stop
  // string itself is not released) and stops; later calls release nothing.
  StopUpdate append(std::string_view piece);

  // End of generation without a stop string: everything still held.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  size_t holdBack() const;

  std::vector<std::string> stop_strings_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace kiln::sampling
