// The members of a JSON object as Python's json.loads makes them a dict: a key
// that repeats is one member, at its first position, with its last value.
// Megatron's scripts read every JSON line that way, so iterating simdjson's
// object as is (every repetition) would give other groups and other text.
//
//   for (const auto& [key, value] : zlm::python_members(obj)) ...
#pragma once

#include <simdjson.h>

#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zlm {

inline std::vector<std::pair<std::string_view, simdjson::dom::element>> python_members(simdjson::dom::object obj) {
  std::vector<std::pair<std::string_view, simdjson::dom::element>> members;
  std::unordered_map<std::string_view, size_t> at;
  for (auto [key, value] : obj) {
    const auto [it, fresh] = at.emplace(key, members.size());
    if (fresh) members.emplace_back(key, value);
    else members[it->second].second = value;
  }
  return members;
}

}  // namespace zlm
