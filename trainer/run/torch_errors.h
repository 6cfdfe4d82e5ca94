// LibTorch's exceptions (c10::Error) as one-line zlm::Error, so that no C++
// stack trace reaches a user of convert_gpt or generate_gpt:
//
//   return zlm::tool_main("convert_gpt", app, common, argc, argv, [&] {
//     return zlm::trainer::with_torch_errors([&] { ...; return 0; });
//   });
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "common/core/error.h"

namespace zlm::trainer {

template <typename F>
int with_torch_errors(F&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw Error(ErrorKind::Format, "LibTorch: %s", msg.c_str());
  }
}

}  // namespace zlm::trainer
