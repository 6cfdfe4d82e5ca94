// A web page's bytes to UTF-8 text (docs/design.md, "download_urls").
//
//   auto d = zlm::web::decode_page(body, "text/html; charset=iso-8859-1", /*html=*/true);
//   d.utf8      // valid UTF-8 whatever the input
//   d.source    // where the charset came from: "bom", "header", "meta", "detected", "utf-8"
//
// The charset is taken, first match wins, from a byte-order mark (as browsers
// do: a BOM outranks a label), the HTTP Content-Type header, a <meta charset>
// or <meta http-equiv=Content-Type> in the first 8 KiB of an HTML page, and
// otherwise ICU's detector (ucsdet). Text that is valid UTF-8 and carries no
// label is taken as UTF-8, and so is text that is mostly UTF-8 (a UTF-8 page with
// a few broken bytes: valid multi-byte sequences at least 4 times the invalid
// ones, or at least as many when UTF-8 is declared). A UTF-8 label that the
// bytes contradict gives way to the detector. Labels are mapped as the WHATWG
// Encoding Standard maps them (latin1 and us-ascii mean windows-1252, gb2312
// means GBK, a UTF-16 label inside <meta> means UTF-8). Bytes that are invalid in
// the chosen charset become U+FFFD and are counted: invalid bytes never reach
// the output. O(size); never throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zlm::web {

struct DecodedPage {
  std::string utf8;
  std::string charset;  // the charset used, by its IANA name ("UTF-8", "windows-1252", ...)
  std::string source;   // "bom", "header", "meta", "detected" or "utf-8" (valid UTF-8, no label)
  uint64_t replaced = 0;  // invalid sequences replaced by U+FFFD
};

DecodedPage decode_page(std::string_view body, std::string_view content_type, bool html);

// The charset parameter of a Content-Type value ("" when absent), unquoted, lower case.
std::string charset_from_content_type(std::string_view content_type);

// The charset an HTML page declares in a <meta> tag within its first `scan_bytes` ("" when none).
std::string charset_from_meta(std::string_view html, size_t scan_bytes = 8192);

// The WHATWG mapping of a label to the charset browsers use for it, as ICU names it
// ("" for a label ICU cannot convert).
std::string canonical_charset(std::string_view label);

}  // namespace zlm::web
