// Main-text extraction from an HTML page: the article body, without the page's
// navigation, boilerplate, scripts and styles (docs/design.md, "download_urls").
//
//   std::string text = zlm::web::extract_main_text(utf8_html);
//
// The page is parsed by MyHTML (Debian libmodest-dev, an HTML5 parser: the WHATWG tree
// construction, so broken markup nests as a browser nests it). The body is
// found by scoring, in the manner of Mozilla's Readability: text blocks of 25
// characters or more score by length and commas; each score flows to the
// block's ancestors (less the further up); an element's score is weighed by
// its class/id (words such as "comment", "sidebar" and "share" count against it,
// "article", "content" and "post" for it) and by the share of its text that is
// link text. The best element and its siblings of similar worth make the body;
// inside it, lists, tables and boxes that look like link farms or widgets are
// dropped (but not one holding a third of the body's text). A pass that finds
// under 500 characters runs again with one rule less; comment sections stay out. Paragraphs are separated by a blank line, <br> gives one newline,
// white space inside a paragraph collapses to one space.
//
// Input must be UTF-8 (the decoder in charset.h makes it so). Never throws on
// any input; O(size of the page).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zlm::web {

struct ExtractedPage {
  std::string text;   // the main text; empty when the page has none
  std::string title;  // <title>, white space collapsed
  bool too_deep = false;  // refused: elements nested deeper than kMaxOpenTags (see below)
};

// Pages whose elements nest deeper than this (estimated from the tags, an upper
// bound) are not parsed: the parser's time grows with the square of the depth,
// and real pages stay far below.
constexpr size_t kMaxOpenTags = 10000;

ExtractedPage extract_page(std::string_view utf8_html);

// extract_page(html).text.
std::string extract_main_text(std::string_view utf8_html);

}  // namespace zlm::web
