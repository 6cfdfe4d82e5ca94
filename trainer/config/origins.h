// Where each of pretrain_gpt's settings came from, so that an error about a
// value names what set it: the command line ("--zero-stage 2", as typed:
// "--cpu-optimizer" for the setting of "--cpu-offload"), a file
// ("ds.json: zero_optimization.stage 3"), or nothing (the default).
//
//   Origins o(flags.given);
//   o.from_file("--zero-stage", "ds.json: zero_optimization.stage 3");
//   o.describe("--zero-stage");   // "ds.json: zero_optimization.stage 3"
//
// Settings are keyed by their canonical flag. Torch-free; not thread-safe.
#pragma once

#include <map>
#include <string>

namespace zlm::trainer {

class Origins {
 public:
  explicit Origins(std::map<std::string, std::string> command_line = {}) : command_line_(std::move(command_line)) {}
  void from_file(const std::string& flag, const std::string& where) { files_[flag] = where; }
  bool on_command_line(const std::string& flag) const { return command_line_.count(flag) > 0; }
  bool given(const std::string& flag) const { return on_command_line(flag) || files_.count(flag) > 0; }
  // The file's words when a file set it (it was merged over the command line), else the command
  // line's, else "FLAG (default)".
  std::string describe(const std::string& flag) const {
    if (auto f = files_.find(flag); f != files_.end()) return f->second;
    if (auto c = command_line_.find(flag); c != command_line_.end()) return c->second;
    return flag + " (default)";
  }

 private:
  std::map<std::string, std::string> command_line_, files_;
};

}  // namespace zlm::trainer
