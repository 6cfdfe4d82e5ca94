#include "trainer/report/phase_timers.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/core/error.h"

namespace zlm::trainer {

PhaseTimers::Phase& PhaseTimers::phase(const std::string& name) {
  for (Phase& p : phases_)
    if (p.name == name) return p;
  phases_.push_back(Phase{name});
  return phases_.back();
}

void PhaseTimers::start(const std::string& name, int level) {
  if (level > level_) return;
  Phase& p = phase(name);
  ZLM_CHECK(!p.running, "timer %s started twice", name.c_str());
  if (sync_) sync_();
  p.running = true;
  p.started = std::chrono::steady_clock::now();
}

void PhaseTimers::stop(const std::string& name, int level) {
  if (level > level_) return;
  Phase& p = phase(name);
  ZLM_CHECK(p.running, "timer %s stopped without a start", name.c_str());
  if (sync_) sync_();
  p.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();
  p.running = false;
}

std::vector<PhaseTimes> PhaseTimers::take(int64_t iterations) {
  std::vector<PhaseTimes> out;
  for (Phase& p : phases_) {
    out.push_back({p.name, 1000.0 * p.seconds / static_cast<double>(std::max<int64_t>(1, iterations))});
    p.seconds = 0;
  }
  return out;
}

namespace {

// Megatron's name column: the name and a space, padded with dots to 48.
std::string dotted(const std::string& name) {
  std::string s = name + " ";
  if (s.size() < 48) s.append(48 - s.size(), '.');
  return s;
}

}  // namespace

std::vector<PhaseMax> phase_maxima(const std::vector<std::vector<PhaseTimes>>& by_rank) {
  std::vector<PhaseMax> out;
  for (const auto& rank : by_rank)
    for (const PhaseTimes& t : rank) {
      auto it = std::find_if(out.begin(), out.end(), [&](const PhaseMax& m) { return m.name == t.name; });
      if (it == out.end()) out.push_back({t.name, t.ms, t.ms});
      else it->min_ms = std::min(it->min_ms, t.ms), it->max_ms = std::max(it->max_ms, t.ms);
    }
  return out;
}

std::string format_phase_times(const std::vector<std::vector<PhaseTimes>>& by_rank, const std::string& option) {
  const std::vector<PhaseMax> phases = phase_maxima(by_rank);
  if (phases.empty()) return "";
  std::string out = option == "max" ? "max time across ranks (ms):" : option == "all" ? "times across ranks (ms):" : "(min, max) time across ranks (ms):";
  char buf[160];
  for (const PhaseMax& p : phases) {
    if (option == "all") {
      out += "\n  " + p.name + ":";
      for (size_t r = 0; r < by_rank.size(); ++r)
        for (const PhaseTimes& t : by_rank[r])
          if (t.name == p.name) std::snprintf(buf, sizeof buf, "\n     rank %2zu: %.2f", r, t.ms), out += buf;
      continue;
    }
    if (option == "max") std::snprintf(buf, sizeof buf, "\n    %s: %.2f", dotted(p.name).c_str(), p.max_ms);
    else std::snprintf(buf, sizeof buf, "\n    %s: (%.2f, %.2f)", dotted(p.name).c_str(), p.min_ms, p.max_ms);
    out += buf;
  }
  return out;
}

std::string encode_phase_times(const std::vector<PhaseTimes>& times) {
  std::string out;
  char buf[64];
  for (const PhaseTimes& t : times) {
    std::snprintf(buf, sizeof buf, "=%.17g;", t.ms);
    out += t.name + buf;
  }
  return out;
}

std::vector<PhaseTimes> decode_phase_times(const std::string& line) {
  std::vector<PhaseTimes> out;
  for (size_t at = 0; at < line.size();) {
    const size_t eq = line.find('=', at), end = line.find(';', at);
    ZLM_CHECK(eq != std::string::npos && end != std::string::npos && eq < end, "phase times '%s'", line.c_str());
    out.push_back({line.substr(at, eq - at), std::strtod(line.c_str() + eq + 1, nullptr)});
    at = end + 1;
  }
  return out;
}

}  // namespace zlm::trainer
