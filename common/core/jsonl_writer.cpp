#include "common/core/jsonl_writer.h"

namespace zlm {

void JsonlWriter::write_raw_line(std::string_view line) {
  out_.write(line);
  out_.put('\n');
  ++lines_;
}

}  // namespace zlm
