// Unicode repair equivalent to ftfy.fix_text() with its default configuration
// (ftfy 6.3.1: https://ftfy.readthedocs.io), implemented on ICU:
//
//   std::string fixed = zlm::fix_text("The Mona Lisa doesnÃ¢â‚¬â„¢t have eyebrows.");
//   // -> "The Mona Lisa doesn't have eyebrows."
//
// Steps, per line (ftfy's segments), repeated until nothing changes: HTML
// entities (only while no '<' has been seen: ftfy's "auto" rule), mojibake
// (text that was UTF-8 decoded as one of ten single-byte encodings, possibly
// several layers deep, detected by ftfy's "badness" heuristic; with its
// restore_byte_a0, lossy-sequence, CESU-8 and inconsistent-UTF-8 handling),
// C1 controls as Windows-1252, Latin ligatures, fullwidth characters, curly
// quotes, line breaks, terminal escapes, control characters, NFC.
// The data tables come from ftfy itself (common/text/ftfy_tables.inc, generated).
// Known differences from ftfy are listed in tests/unit/text_fix_test.cpp.
//
// Thread-safe (per-thread ICU matchers). Cost: O(n) per pass for ASCII text
// (which skips the mojibake machinery), regex searches for the rest.
#pragma once

#include <string>
#include <string_view>

namespace zlm {

// `text` must be valid UTF-8; the result is valid UTF-8.
std::string fix_text(std::string_view text);

// ftfy's badness heuristic: does this text look like mojibake?
bool text_is_bad(std::string_view text);

}  // namespace zlm
