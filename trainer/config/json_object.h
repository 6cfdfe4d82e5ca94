// A JSON settings file, for the trainer's JSON inputs (DeepSpeed's config,
// Hugging Face's config.json), read as their own readers read it: a repeated
// key keeps its last value, as Python's json.load (transformers), or is an
// error naming it, as DeepSpeed's reader (object_pairs_hook that refuses
// duplicates). Every error names the file, the dotted key and what was expected.
//
//   JsonObjectView cfg = read_json_object("ds.json", RepeatedKeys::kRefuse);
//   if (cfg.has("zero_optimization")) {
//     JsonObjectView z = cfg.object("zero_optimization");
//     int64_t stage = z.integer("stage");        // "ds.json: zero_optimization.stage: must be an integer" for 2.5
//     if (stage > 3) z.fail("stage", "must be 0, 1, 2 or 3");
//   }
//   std::vector<std::string> inert = cfg.check_keys(known, accepted_without_effect);
//
// Views share the parsed document (cheap to copy). Parsing is simdjson's DOM;
// a build without simdjson (the trainer alone, where libsimdjson-dev is
// missing) throws zlm::Error(Usage) saying so. Invalid JSON is
// zlm::Error(Format) with the line and column; a wrong type is
// zlm::Error(Usage) naming the key. Not thread-safe per document.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace zlm::trainer {

enum class RepeatedKeys { kLastWins, kRefuse };

class JsonObjectView {
 public:
  struct Doc;     // the file's text and parser (json_object.cpp)
  struct Fields;  // this object's keys, last value wins

  bool has(const std::string& key) const;
  bool is_null(const std::string& key) const;
  double number(const std::string& key) const;     // finite
  int64_t integer(const std::string& key) const;   // a number with no fraction
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::vector<double> numbers(const std::string& key) const;  // an array of numbers
  JsonObjectView object(const std::string& key) const;
  // Every key in `known` or `inert`; returns the inert ones present (in file
  // order) and throws for any other, naming it as unknown.
  std::vector<std::string> check_keys(const std::set<std::string>& known, const std::set<std::string>& inert) const;
  // "where.key", the dotted name of a key of this object.
  std::string name(const std::string& key) const;
  const std::string& path() const;
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

 private:
  friend JsonObjectView read_json_object(const std::string& path, RepeatedKeys repeated);
  std::shared_ptr<const Doc> doc_;
  std::shared_ptr<const Fields> fields_;
  std::string where_;
};

// Reads `path`, whose top level must be an object. Throws zlm::Error(Io) when
// it cannot be read, Format when it is not JSON or not an object, or (with
// kRefuse) when an object repeats a key.
JsonObjectView read_json_object(const std::string& path, RepeatedKeys repeated = RepeatedKeys::kLastWins);

// Whether this build can read JSON settings (false without simdjson).
bool json_settings_supported();

}  // namespace zlm::trainer
