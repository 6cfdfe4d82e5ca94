// JSON string escaping, as used by the JSONL writer and the stats files.
//
//   std::string out; zlm::append_json_string(out, "a\"b\n");   // -> "a\"b\n" quoted
//
// Escapes '"', '\\' and control characters (< 0x20, as \n \t \r \b \f or
// \u00XX); every other byte, UTF-8 included, is copied as is (like Python's
// json.dumps(..., ensure_ascii=False)). With ascii_only, non-ASCII code points
// are written as \uXXXX (surrogate pairs above U+FFFF), like json.dumps'
// default; invalid UTF-8 bytes are then written as U+FFFD.
// Cost: O(n), appends to `out`.
#pragma once

#include <string>
#include <string_view>

namespace zlm {

void append_json_string(std::string& out, std::string_view s, bool ascii_only = false);
inline std::string json_string(std::string_view s, bool ascii_only = false) {
  std::string out;
  append_json_string(out, s, ascii_only);
  return out;
}

}  // namespace zlm
