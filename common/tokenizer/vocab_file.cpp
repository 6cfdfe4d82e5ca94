#include "common/tokenizer/vocab_file.h"

#include <cstdlib>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/output_file.h"

namespace zlm {

VocabSummary read_vocab_summary(const std::string& path) {
  const std::string s = read_file(path);
  VocabSummary out;
  int depth = 0;
  bool in_string = false;
  std::string current;  // the last string seen (escapes kept as their letter: enough to recognise <|endoftext|>)
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\' && i + 1 < s.size()) current.push_back(s[++i]);
      else if (c == '"') in_string = false;
      else current.push_back(c);
      continue;
    }
    if (c == '"') {
      in_string = true;
      current.clear();
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ':' && depth == 1) {
      ++out.entries;
      if (current == "<|endoftext|>") out.eod_id = std::strtoll(s.c_str() + i + 1, nullptr, 10);
    }
  }
  if (out.entries == 0) throw Error(ErrorKind::Format, "%s: no entries (not a GPT-2 vocab.json?)", path.c_str());
  return out;
}

}  // namespace zlm
