// The stats summary every tool prints at the end and writes with --stats-out.
//
//   zlm::Stats stats("preprocess_data");
//   stats.set("docs_in", 1000);
//   stats.set("elapsed_sec", 1.25);
//   stats.print_table();                 // stderr, one counter a line
//   stats.write_json("stats.json");      // atomic; {"tool": ..., "docs_in": 1000, ...}
//
// Keys keep insertion order; setting a key again replaces its value in place.
// Not thread-safe (fill it from one thread at the end of a run).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace zlm {

class Stats {
 public:
  using Value = std::variant<uint64_t, int64_t, double, std::string>;
  explicit Stats(std::string tool) : tool_(std::move(tool)) {}

  void set(const std::string& key, uint64_t value) { put(key, value); }
  void set(const std::string& key, int64_t value) { put(key, value); }
  void set(const std::string& key, int value) { put(key, static_cast<int64_t>(value)); }
  void set(const std::string& key, double value) { put(key, value); }
  void set(const std::string& key, std::string value) { put(key, std::move(value)); }
  void set(const std::string& key, const char* value) { put(key, std::string(value)); }

  const Value* get(const std::string& key) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

  std::string to_json() const;
  void print_table() const;
  void write_json(const std::string& path) const;

 private:
  void put(const std::string& key, Value value);
  std::string tool_;
  std::vector<std::pair<std::string, Value>> entries_;
};

}  // namespace zlm
