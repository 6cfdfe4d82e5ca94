// The one way zerolm writes JSON: escaped strings, numbers that read back to
// the same double, and objects built field by field (JSONL lines, --stats-out,
// metrics.jsonl, the memory plan, Hugging Face config.json and safetensors
// headers). Reading JSON is simdjson's job (common/io/jsonl.h).
//
//   std::string s = zlm::json_string("a\"b\n");            // "a\"b\n", quoted
//   zlm::JsonObject o;
//   o.add("iteration", 3).add("lm_loss", 2.5).add("split", "valid").add_null("ppl");
//   o.add_raw("shape", zlm::json_array(std::vector<int64_t>{2, 3}));
//   out << o.str() << "\n";                                 // {"iteration": 3, "lm_loss": 2.5, ...}
//
// Strings: '"', '\\' and control characters (< 0x20, as \n \t \r \b \f or
// \u00XX) are escaped; every other byte, UTF-8 included, is copied as is (like
// Python's json.dumps(..., ensure_ascii=False)). With ascii_only, non-ASCII code
// points are written as \uXXXX (surrogate pairs above U+FFFF), like json.dumps'
// default; invalid UTF-8 bytes are then written as U+FFFD.
// Numbers: integers exactly; doubles as Python's repr() (shortest round trip,
// "1.0" not "1"); a non-finite double is zlm::Error(Internal) (JSON has none).
// Fields appear in the order added, separated by ", " and ": " as json.dumps does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace zlm {

void append_json_string(std::string& out, std::string_view s, bool ascii_only = false);
inline std::string json_string(std::string_view s, bool ascii_only = false) {
  std::string out;
  append_json_string(out, s, ascii_only);
  return out;
}

// Python's repr() of a float: the shortest text that reads back to the same
// double, "1.0" rather than "1", "inf"/"nan" for non-finite values.
std::string python_float_repr(double value);
// python_float_repr for JSON, which has no inf/nan (those are zlm::Error(Internal)).
std::string json_number(double value);

class JsonObject {
 public:
  explicit JsonObject(bool ascii_only = false) : ascii_only_(ascii_only) {}

  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, bool value);
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  JsonObject& add(std::string_view key, T value) {
    return add_raw(key, std::to_string(value));
  }
  // null when empty.
  JsonObject& add(std::string_view key, const std::optional<double>& value);
  JsonObject& add_null(std::string_view key) { return add_raw(key, "null"); }
  // A value that is already JSON text (a nested object's str(), an array).
  JsonObject& add_raw(std::string_view key, std::string_view json);

  // The object's text, "{...}" on one line.
  std::string str() const { return buf_ + "}"; }

 private:
  void key(std::string_view k);
  bool ascii_only_;
  std::string buf_ = "{";
};

// "[1, 2, 3]".
template <class T>
  requires std::is_integral_v<T>
std::string json_array(const std::vector<T>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace zlm
