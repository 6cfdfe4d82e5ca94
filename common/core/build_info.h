// Build information generated at configure time (cmake/build_info.cpp.in):
// printed by --version and at the top of every tool's log.
#pragma once

namespace zlm {
const char* build_version();
const char* build_git_describe();
const char* build_type();
const char* build_compiler();
}  // namespace zlm
