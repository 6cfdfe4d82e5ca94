#include "tools/download_urls/html_text.h"

#include <myhtml/api.h>

#include "common/core/ascii.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

namespace zlm::web {
namespace {

// ---- the page as a compact tree (gumbo's own tree has no room for scores) ----

struct Child {
  int elem;               // index of an element, or -1 for text
  std::string_view text;  // the text when elem < 0
};

struct Elem {
  myhtml_tag_id_t tag = MyHTML_TAG__UNDEF;
  int parent = -1;
  std::vector<Child> kids;
  std::string klass, id;  // lower case
  bool hard_drop = false;     // never text (script, nav, hidden, ...), under any flags
  bool unlikely = false;      // boilerplate by its class or id
  bool comments = false;      // a comment section by its class or id: dropped by every pass
  bool holds_article = false; // is or holds <article>, <main> or itemprop=articleBody
  bool preformatted = false;
  int class_weight = 0;       // class/id words: -25 or +25 each for the class and the id
  // Set for each pass by apply():
  bool dropped = false;
  int weight = 0;             // class/id weight
  // Over the element's kept subtree:
  uint32_t chars = 0;       // visible characters, white space runs counted once
  uint32_t link_chars = 0;  // of which inside <a>
  uint32_t commas = 0;
  uint32_t paragraphs = 0, images = 0, items = 0, inputs = 0, embeds = 0, heading_chars = 0;
  // Readability's score, for elements that received one.
  bool scored = false;
  double score = 0;
};

bool is_space_byte(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// U+00A0 (no-break space, C2 A0) counts as white space, as \s does in the regexes of Readability.
bool nbsp_at(std::string_view s, size_t i) {
  return i + 1 < s.size() && static_cast<unsigned char>(s[i]) == 0xC2 && static_cast<unsigned char>(s[i + 1]) == 0xA0;
}

struct TextCounts {
  uint32_t chars = 0, commas = 0;
};

// Characters of a text node as a browser would show it (runs of white space
// count once; a UTF-8 sequence counts once) and its commas, in any script.
TextCounts count_text(std::string_view s) {
  TextCounts c;
  bool in_space = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (is_space_byte(b) || nbsp_at(s, i)) {
      if (!in_space) ++c.chars;
      in_space = true;
      if (b == 0xC2) ++i;
      continue;
    }
    in_space = false;
    if ((b & 0xC0) != 0x80) ++c.chars;
    if (b == ',') ++c.commas;
    // ، ﹐ ︐ ︑ ⹁ ⸴ ⸲ ，
    static constexpr std::array<std::string_view, 8> kCommas = {"\xD8\x8C",     "\xEF\xB9\x90", "\xEF\xB8\x90",
                                                                 "\xEF\xB8\x91", "\xE2\xB9\x81", "\xE2\xB8\xB4",
                                                                 "\xE2\xB8\xB2", "\xEF\xBC\x8C"};
    if (b >= 0xD8) {
      for (std::string_view comma : kCommas)
        if (s.substr(i, comma.size()) == comma) ++c.commas;
    }
  }
  return c;
}

// A set of words looked for anywhere in a class or id: one pass over the text,
// comparing only the words that start with each byte.
class WordSet {
 public:
  WordSet(std::initializer_list<std::string_view> words) {
    for (std::string_view w : words) by_first_[static_cast<unsigned char>(w[0])].push_back(w);
  }
  bool any_in(std::string_view hay) const {
    for (size_t i = 0; i < hay.size(); ++i) {
      for (std::string_view w : by_first_[static_cast<unsigned char>(hay[i])])
        if (hay.compare(i, w.size(), w) == 0) return true;
    }
    return false;
  }

 private:
  std::array<std::vector<std::string_view>, 256> by_first_;
};

// Elements whose content is never text of the page.
bool never_text(myhtml_tag_id_t tag) {
  switch (tag) {
    case MyHTML_TAG_HEAD: case MyHTML_TAG_SCRIPT: case MyHTML_TAG_STYLE: case MyHTML_TAG_NOSCRIPT:
    case MyHTML_TAG_TEMPLATE: case MyHTML_TAG_SVG: case MyHTML_TAG_MATH: case MyHTML_TAG_IFRAME:
    case MyHTML_TAG_OBJECT: case MyHTML_TAG_EMBED: case MyHTML_TAG_CANVAS: case MyHTML_TAG_NAV:
    case MyHTML_TAG_FOOTER: case MyHTML_TAG_ASIDE: case MyHTML_TAG_BUTTON: case MyHTML_TAG_SELECT:
    case MyHTML_TAG_INPUT: case MyHTML_TAG_TEXTAREA: case MyHTML_TAG_VIDEO: case MyHTML_TAG_AUDIO:
    case MyHTML_TAG_FIGURE: case MyHTML_TAG_FIGCAPTION: case MyHTML_TAG_MAP: case MyHTML_TAG_HEADER:
    case MyHTML_TAG_TITLE: case MyHTML_TAG_MENU: case MyHTML_TAG_DIALOG:
      return true;
    default:
      return false;
  }
}

bool is_heading(myhtml_tag_id_t t) {
  return t == MyHTML_TAG_H1 || t == MyHTML_TAG_H2 || t == MyHTML_TAG_H3 || t == MyHTML_TAG_H4 || t == MyHTML_TAG_H5 ||
         t == MyHTML_TAG_H6;
}

// Elements that start a new line of text in a browser's default style sheet.
bool is_block(myhtml_tag_id_t t) {
  switch (t) {
    case MyHTML_TAG_P: case MyHTML_TAG_DIV: case MyHTML_TAG_SECTION: case MyHTML_TAG_ARTICLE: case MyHTML_TAG_MAIN:
    case MyHTML_TAG_BLOCKQUOTE: case MyHTML_TAG_PRE: case MyHTML_TAG_UL: case MyHTML_TAG_OL: case MyHTML_TAG_LI:
    case MyHTML_TAG_DL: case MyHTML_TAG_DT: case MyHTML_TAG_DD: case MyHTML_TAG_TABLE: case MyHTML_TAG_TR:
    case MyHTML_TAG_TBODY: case MyHTML_TAG_THEAD: case MyHTML_TAG_TFOOT: case MyHTML_TAG_CAPTION:
    case MyHTML_TAG_H1: case MyHTML_TAG_H2: case MyHTML_TAG_H3: case MyHTML_TAG_H4: case MyHTML_TAG_H5:
    case MyHTML_TAG_H6: case MyHTML_TAG_HR: case MyHTML_TAG_ADDRESS: case MyHTML_TAG_FORM: case MyHTML_TAG_FIELDSET:
    case MyHTML_TAG_CENTER: case MyHTML_TAG_BODY: case MyHTML_TAG_HTML: case MyHTML_TAG_HGROUP: case MyHTML_TAG_DETAILS:
    case MyHTML_TAG_SUMMARY:
      return true;
    default:
      return false;
  }
}

// Readability's test for "a <div> that is really a paragraph": it holds none of these.
bool breaks_paragraph(myhtml_tag_id_t t) {
  return t == MyHTML_TAG_BLOCKQUOTE || t == MyHTML_TAG_DL || t == MyHTML_TAG_DIV || t == MyHTML_TAG_IMG ||
         t == MyHTML_TAG_OL || t == MyHTML_TAG_P || t == MyHTML_TAG_PRE || t == MyHTML_TAG_TABLE || t == MyHTML_TAG_UL ||
         t == MyHTML_TAG_SECTION || t == MyHTML_TAG_ARTICLE || is_heading(t);
}

// Class and id words that mark boilerplate, unless a content word is there too.
bool unlikely_candidate(std::string_view class_id) {
  static const WordSet kUnlikely = {"-ad-", "ai2html", "banner", "breadcrumb", "combx", "comment", "community",
                                 "cover-wrap", "disqus", "extra", "footer", "gdpr", "header", "legends", "menu",
                                 "related", "remark", "replies", "rss", "shoutbox", "sidebar", "skyscraper",
                                 "social", "sponsor", "supplemental", "ad-break", "agegate", "pagination", "pager",
                                 "popup", "yom-remote", "newsletter", "share", "subscribe", "cookie", "outbrain",
                                 "taboola", "promo", "signup"};
  static const WordSet kMaybe = {"article", "body", "column", "content", "main", "shadow", "story", "post-text"};
  return kUnlikely.any_in(class_id) && !kMaybe.any_in(class_id);
}

// Readers' comments: never the article, also when a retry relaxes the other class rules.
bool comment_section(std::string_view class_id) {
  static const WordSet kComments = {"comment", "disqus", "replies"};
  return kComments.any_in(class_id);
}

int class_weight_of(std::string_view s) {
  if (s.empty()) return 0;
  static const WordSet kNegative = {"-ad-", "hidden", "banner", "combx", "comment", "com-", "contact", "foot", "gdpr",
                       "masthead", "media", "meta", "outbrain", "promo", "related", "scroll", "share", "shoutbox",
                       "sidebar", "skyscraper", "sponsor", "shopping", "tags", "tool", "widget", "byline", "author",
                       "caption", "credit", "newsletter", "subscribe"};
  static const WordSet kPositive = {"article", "body", "content", "entry", "hentry", "h-entry", "main", "page",
                                    "post", "text", "blog", "story"};
  return (kNegative.any_in(s) ? -25 : 0) + (kPositive.any_in(s) ? 25 : 0);
}


// The attributes the scoring reads, from one pass over an element's attributes.
struct Attributes {
  std::string klass, id;  // lower case
  bool hidden = false;    // hidden, aria-hidden=true, display:none, visibility:hidden, a non-content role
  bool article_body = false;  // itemprop=articleBody
};

bool hidden_style(std::string_view value) {
  std::string style = ascii_lower(value);
  style.erase(std::remove_if(style.begin(), style.end(), [](char c) { return is_space_byte(c); }), style.end());
  return style.find("display:none") != std::string::npos || style.find("visibility:hidden") != std::string::npos;
}

bool hidden_role(std::string_view value) {
  const std::string role = ascii_lower(value);
  for (const char* r : {"navigation", "complementary", "banner", "contentinfo", "menu", "menubar", "dialog", "search",
                        "alertdialog"})
    if (role == r) return true;
  return false;
}

Attributes read_attributes(myhtml_tree_node_t* node) {
  Attributes out;
  for (myhtml_tree_attr_t* a = myhtml_node_attribute_first(node); a; a = myhtml_attribute_next(a)) {
    size_t kn = 0, vn = 0;
    const char* k = myhtml_attribute_key(a, &kn);
    if (!k) continue;
    const std::string_view key(k, kn);  // MyHTML gives HTML attribute names in lower case
    const char* v = myhtml_attribute_value(a, &vn);
    const std::string_view value = v ? std::string_view(v, vn) : std::string_view{};
    if (key == "class") {
      out.klass = ascii_lower(value);
    } else if (key == "id") {
      out.id = ascii_lower(value);
    } else if (key == "hidden") {
      out.hidden = true;
    } else if (key == "aria-hidden") {
      out.hidden |= ascii_iequals(value, "true");
    } else if (key == "style") {
      out.hidden |= hidden_style(value);
    } else if (key == "role") {
      out.hidden |= hidden_role(value);
    } else if (key == "itemprop") {
      out.article_body |= ascii_lower(value).find("articlebody") != std::string::npos;
    }
  }
  return out;
}

class Page {
 public:
  explicit Page(myhtml_tree_node_t* root) { build(root); }

  std::vector<Elem> elems;
  std::string title;
  int body = -1;

 private:
  void build(myhtml_tree_node_t* root);
  int add_element(myhtml_tree_node_t* node, myhtml_tag_id_t tag, int parent);
};

int Page::add_element(myhtml_tree_node_t* node, myhtml_tag_id_t tag, int parent) {
  const int index = static_cast<int>(elems.size());
  elems.emplace_back();
  Elem& e = elems.back();
  e.tag = tag;
  e.parent = parent;
  Attributes attrs = read_attributes(node);
  e.klass = std::move(attrs.klass);
  e.id = std::move(attrs.id);
  e.preformatted = tag == MyHTML_TAG_PRE || (parent >= 0 && elems[parent].preformatted);
  const bool exempt = tag == MyHTML_TAG_BODY || tag == MyHTML_TAG_HTML || tag == MyHTML_TAG_ARTICLE ||
                      tag == MyHTML_TAG_MAIN || tag == MyHTML_TAG_A;
  e.hard_drop = never_text(tag) || attrs.hidden;
  e.unlikely = !exempt && unlikely_candidate(e.klass + " " + e.id);
  e.comments = e.unlikely && comment_section(e.klass + " " + e.id);
  e.class_weight = class_weight_of(e.klass) + class_weight_of(e.id);
  if (tag == MyHTML_TAG_ARTICLE || tag == MyHTML_TAG_MAIN) e.holds_article = true;
  if (attrs.article_body) e.holds_article = true;
  if (tag == MyHTML_TAG_BODY && body < 0) body = index;
  if (parent >= 0) elems[parent].kids.push_back({index, {}});
  return index;
}

void Page::build(myhtml_tree_node_t* root) {
  // Iterative depth-first walk (pages nest deep enough to overflow a recursive one).
  std::vector<std::pair<myhtml_tree_node_t*, int>> stack{{root, -1}};
  std::vector<myhtml_tree_node_t*> kids;
  while (!stack.empty()) {
    auto [node, parent] = stack.back();
    stack.pop_back();
    const myhtml_tag_id_t tag = myhtml_node_tag_id(node);
    if (tag == MyHTML_TAG__TEXT) {
      size_t n = 0;
      const char* t = myhtml_node_text(node, &n);
      if (parent >= 0 && t) elems[parent].kids.push_back({-1, std::string_view(t, n)});
      continue;
    }
    if (tag == MyHTML_TAG__COMMENT || tag == MyHTML_TAG__DOCTYPE) continue;
    if (myhtml_node_namespace(node) != MyHTML_NAMESPACE_HTML && tag != MyHTML_TAG_SVG && tag != MyHTML_TAG_MATH &&
        parent >= 0 && elems[parent].hard_drop)
      continue;  // inside <svg> or <math>: already dropped
    int index = parent;
    if (tag != MyHTML_TAG__UNDEF || parent >= 0) {
      if (tag == MyHTML_TAG_TITLE && title.empty()) {
        if (myhtml_tree_node_t* t = myhtml_node_child(node)) {
          size_t n = 0;
          const char* text = myhtml_node_text(t, &n);
          if (text) title.assign(text, n);
        }
      }
      index = add_element(node, tag, parent);
    }
    kids.clear();
    for (myhtml_tree_node_t* k = myhtml_node_child(node); k; k = myhtml_node_next(k)) kids.push_back(k);
    for (size_t i = kids.size(); i-- > 0;) stack.push_back({kids[i], index});
  }
  for (size_t i = elems.size(); i-- > 0;)
    if (elems[i].holds_article && elems[i].parent >= 0) elems[elems[i].parent].holds_article = true;
}

// ---- statistics, scoring and the choice of the body ----

// What a pass may use; each retry of a page that gave too little text turns one off (as Readability does).
struct Flags {
  bool strip_unlikely = true;       // drop elements whose class/id says boilerplate
  bool weight_classes = true;       // let class/id words weigh scores
  bool clean_conditionally = true;  // drop link farms and widgets inside the body
};

// Resets every element for a pass under `flags`. Parents come before children in the array.
void apply(std::vector<Elem>& elems, const Flags& flags) {
  for (Elem& e : elems) {
    const bool parent_dropped = e.parent >= 0 && elems[e.parent].dropped;
    e.dropped = parent_dropped || e.hard_drop ||
                ((flags.strip_unlikely ? e.unlikely : e.comments) && !e.holds_article);
    e.weight = flags.weight_classes ? e.class_weight : 0;
    e.chars = e.link_chars = e.commas = 0;
    e.paragraphs = e.images = e.items = e.inputs = e.embeds = e.heading_chars = 0;
    e.scored = false;
    e.score = 0;
  }
}

void count_subtrees(std::vector<Elem>& elems) {
  // Children come after their parent in the array: one backward pass sums subtrees.
  for (size_t i = elems.size(); i-- > 0;) {
    Elem& e = elems[i];
    if (e.dropped) continue;
    for (const Child& k : e.kids) {
      if (k.elem >= 0) continue;
      TextCounts c = count_text(k.text);
      e.chars += c.chars;
      e.commas += c.commas;
    }
    if (e.tag == MyHTML_TAG_A) e.link_chars = e.chars;
    if (e.tag == MyHTML_TAG_P) ++e.paragraphs;
    if (e.tag == MyHTML_TAG_IMG) ++e.images;
    if (e.tag == MyHTML_TAG_LI) ++e.items;
    if (e.tag == MyHTML_TAG_INPUT) ++e.inputs;
    if (e.tag == MyHTML_TAG_EMBED || e.tag == MyHTML_TAG_OBJECT || e.tag == MyHTML_TAG_IFRAME) ++e.embeds;
    if (is_heading(e.tag)) e.heading_chars = e.chars;
    if (e.parent < 0) continue;
    Elem& p = elems[e.parent];
    p.chars += e.chars;
    p.link_chars += p.tag == MyHTML_TAG_A ? 0 : e.link_chars;
    p.commas += e.commas;
    p.paragraphs += e.paragraphs;
    p.images += e.images;
    p.items += e.items;
    p.inputs += e.inputs;
    p.embeds += e.embeds;
    p.heading_chars += e.heading_chars;
  }
}

double link_density(const Elem& e) { return e.chars == 0 ? 0.0 : static_cast<double>(e.link_chars) / e.chars; }

class Scorer {
 public:
  explicit Scorer(std::vector<Elem>& elems) : elems_(elems) {}
  void score_all();
  int choose_top() const;
  std::vector<int> gather_body(int top) const;

 private:
  void initialize(int i);
  void credit(int paragraph_parent, uint32_t chars, uint32_t commas);
  bool scorable(int i) const;
  bool ends_sentence(int i) const;
  std::vector<Elem>& elems_;
};

void Scorer::initialize(int i) {
  Elem& e = elems_[i];
  if (e.scored) return;
  e.scored = true;
  switch (e.tag) {
    case MyHTML_TAG_DIV: e.score = 5; break;
    case MyHTML_TAG_PRE: case MyHTML_TAG_TD: case MyHTML_TAG_BLOCKQUOTE: e.score = 3; break;
    case MyHTML_TAG_ADDRESS: case MyHTML_TAG_OL: case MyHTML_TAG_UL: case MyHTML_TAG_DL: case MyHTML_TAG_DD:
    case MyHTML_TAG_DT: case MyHTML_TAG_LI: case MyHTML_TAG_FORM: e.score = -3; break;
    case MyHTML_TAG_H1: case MyHTML_TAG_H2: case MyHTML_TAG_H3: case MyHTML_TAG_H4: case MyHTML_TAG_H5:
    case MyHTML_TAG_H6: case MyHTML_TAG_TH: e.score = -5; break;
    default: e.score = 0;
  }
  e.score += e.weight;
}

// A paragraph's worth flows to its ancestors: all of it to the first, half to
// the second, 1/(3 level) further up, five levels at most.
void Scorer::credit(int first_ancestor, uint32_t chars, uint32_t commas) {
  if (chars < 25) return;
  const double worth = 1.0 + commas + std::min(chars / 100u, 3u);
  int level = 0;
  for (int a = first_ancestor; a >= 0 && level < 5; a = elems_[a].parent, ++level) {
    if (elems_[a].parent < 0) break;  // <html> takes no score
    initialize(a);
    const double divider = level == 0 ? 1.0 : level == 1 ? 2.0 : level * 3.0;
    elems_[a].score += worth / divider;
  }
}

bool Scorer::scorable(int i) const {
  const Elem& e = elems_[i];
  switch (e.tag) {
    case MyHTML_TAG_P: case MyHTML_TAG_PRE: case MyHTML_TAG_TD: case MyHTML_TAG_SECTION: case MyHTML_TAG_H2:
    case MyHTML_TAG_H3: case MyHTML_TAG_H4: case MyHTML_TAG_H5: case MyHTML_TAG_H6:
      return true;
    default:
      break;
  }
  if (e.tag != MyHTML_TAG_DIV) return false;
  for (const Child& k : e.kids)
    if (k.elem >= 0 && !elems_[k.elem].dropped && breaks_paragraph(elems_[k.elem].tag)) return false;
  return true;  // a <div> of phrasing content only is a paragraph
}

void Scorer::score_all() {
  for (int i = 0; i < static_cast<int>(elems_.size()); ++i) {
    const Elem& e = elems_[i];
    if (e.dropped || e.parent < 0) continue;
    if (scorable(i)) {
      credit(e.parent, e.chars, e.commas);
      continue;
    }
    if (e.tag != MyHTML_TAG_DIV) continue;
    // A <div> mixing blocks and loose text: the loose text is a paragraph of its own.
    TextCounts loose;
    for (const Child& k : e.kids) {
      if (k.elem < 0) {
        TextCounts c = count_text(k.text);
        loose.chars += c.chars;
        loose.commas += c.commas;
      } else if (!elems_[k.elem].dropped && !is_block(elems_[k.elem].tag)) {
        loose.chars += elems_[k.elem].chars;
        loose.commas += elems_[k.elem].commas;
      }
    }
    credit(i, loose.chars, loose.commas);
  }
  for (Elem& e : elems_)
    if (e.scored) e.score *= 1.0 - link_density(e);
}

int Scorer::choose_top() const {
  std::vector<int> best;  // the five best, best first
  for (int i = 0; i < static_cast<int>(elems_.size()); ++i) {
    if (!elems_[i].scored || elems_[i].dropped) continue;
    auto it = std::find_if(best.begin(), best.end(), [&](int b) { return elems_[i].score > elems_[b].score; });
    best.insert(it, i);
    if (best.size() > 5) best.pop_back();
  }
  if (best.empty()) return -1;
  int top = best[0];
  const double top_score = elems_[top].score;
  // Several near-best candidates under one ancestor: the ancestor is the body.
  std::vector<int> alternatives;
  for (size_t k = 1; k < best.size(); ++k)
    if (elems_[best[k]].score / top_score >= 0.75) alternatives.push_back(best[k]);
  if (alternatives.size() >= 3) {
    for (int a = elems_[top].parent; a >= 0 && elems_[a].tag != MyHTML_TAG_BODY; a = elems_[a].parent) {
      int inside = 0;
      for (int alt : alternatives) {
        for (int x = alt; x >= 0; x = elems_[x].parent)
          if (x == a) { ++inside; break; }
      }
      if (inside >= 3) { top = a; break; }
    }
  }
  // Climb while the parent scores higher (the body spans more than one box).
  double last = elems_[top].scored ? elems_[top].score : 0;
  for (int p = elems_[top].parent; p >= 0 && elems_[p].tag != MyHTML_TAG_BODY; p = elems_[p].parent) {
    if (!elems_[p].scored) continue;
    if (elems_[p].score < last / 3) break;
    if (elems_[p].score > last) { top = p; break; }
    last = elems_[p].score;
  }
  // An only child stands for its parent.
  for (int p = elems_[top].parent; p >= 0 && elems_[p].tag != MyHTML_TAG_BODY; p = elems_[p].parent) {
    int kept = 0;
    for (const Child& k : elems_[p].kids)
      if (k.elem >= 0 && !elems_[k.elem].dropped) ++kept;
    if (kept != 1) break;
    top = p;
  }
  return top;
}

std::vector<int> Scorer::gather_body(int top) const {
  const int parent = elems_[top].parent;
  if (parent < 0) return {top};
  const double top_score = elems_[top].scored ? elems_[top].score : 0;
  const double threshold = std::max(10.0, top_score * 0.2);
  std::vector<int> body;
  for (const Child& k : elems_[parent].kids) {
    if (k.elem < 0) continue;
    const Elem& s = elems_[k.elem];
    if (s.dropped) continue;
    if (k.elem == top) {
      body.push_back(k.elem);
      continue;
    }
    const double bonus = (!s.klass.empty() && s.klass == elems_[top].klass) ? top_score * 0.2 : 0;
    if (s.scored && s.score + bonus >= threshold) {
      body.push_back(k.elem);
    } else if (s.tag == MyHTML_TAG_P) {
      const double ld = link_density(s);
      if ((s.chars > 80 && ld < 0.25) || (s.chars > 0 && s.chars <= 80 && ld == 0 && ends_sentence(k.elem)))
        body.push_back(k.elem);
    }
  }
  return body;
}

// ---- cleaning inside the body and writing the text ----

bool looks_like_boilerplate(const Elem& e) {
  switch (e.tag) {
    case MyHTML_TAG_TABLE: case MyHTML_TAG_UL: case MyHTML_TAG_OL: case MyHTML_TAG_DIV: case MyHTML_TAG_SECTION:
    case MyHTML_TAG_FORM: case MyHTML_TAG_FIELDSET: case MyHTML_TAG_DL:
      break;
    default:
      return is_heading(e.tag) && e.weight < 0;
  }
  const int weight = e.weight;
  if (weight + (e.scored ? e.score : 0) < 0) return true;
  if (e.commas >= 10) return false;
  const bool list = e.tag == MyHTML_TAG_UL || e.tag == MyHTML_TAG_OL;
  const double p = e.paragraphs, img = e.images;
  const double ld = link_density(e);
  const double heading_density = e.chars ? static_cast<double>(e.heading_chars) / e.chars : 0;
  if (img > 1 && p / img < 0.5) return true;
  if (!list && static_cast<double>(e.items) - 100 > p) return true;
  if (e.inputs > e.paragraphs / 3) return true;
  if (!list && heading_density < 0.9 && e.chars < 25 && (e.images == 0 || e.images > 2)) return true;
  if (!list && weight < 25 && ld > 0.2) return true;
  if (weight >= 25 && ld > 0.5) return true;
  if ((e.embeds == 1 && e.chars < 75) || e.embeds > 1) return true;
  return false;
}

class TextWriter {
 public:
  // clean: drop boxes that look like boilerplate, except one holding over `keep_chars`
  // characters of non-link text (a third of the body's: the article itself, whatever its box looks like).
  TextWriter(const std::vector<Elem>& elems, bool clean, uint32_t keep_chars = UINT32_MAX)
      : elems_(elems), clean_(clean), keep_chars_(keep_chars) {}
  void element(int i);
  // Text as a browser shows it: white space (no-break space included) collapsed to one space.
  void text(std::string_view s, bool preformatted);
  std::string take();

 private:
  void paragraph_break() { pending_break_ = std::max(pending_break_, 2); }
  void line_break() { pending_break_ = std::max(pending_break_, 1); }
  const std::vector<Elem>& elems_;
  bool clean_;
  uint32_t keep_chars_;
  std::string out_;
  int pending_break_ = 0;  // 0 none, 1 newline, 2 blank line
  bool pending_space_ = false;
};

void TextWriter::text(std::string_view s, bool preformatted) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const bool nbsp = nbsp_at(s, i);
    if (preformatted && b == '\n') {
      line_break();
      continue;
    }
    if (is_space_byte(b) || nbsp) {
      pending_space_ = true;
      if (nbsp) ++i;
      continue;
    }
    if (!out_.empty()) {
      if (pending_break_ > 0) {
        out_.append(static_cast<size_t>(pending_break_), '\n');
      } else if (pending_space_) {
        out_.push_back(' ');
      }
    }
    pending_break_ = 0;
    pending_space_ = false;
    out_.push_back(static_cast<char>(b));
  }
}

void TextWriter::element(int i) {
  // Explicit stack: (element, next child) pairs.
  std::vector<std::pair<int, size_t>> stack{{i, 0}};
  while (!stack.empty()) {
    auto& [e, next] = stack.back();
    const Elem& el = elems_[e];
    if (next == 0) {
      if (el.dropped ||
          (clean_ && e != i && el.chars - el.link_chars <= keep_chars_ && looks_like_boilerplate(el))) {
        stack.pop_back();
        continue;
      }
      if (is_block(el.tag) || el.tag == MyHTML_TAG_TR) paragraph_break();
      if (el.tag == MyHTML_TAG_BR) line_break();
      if (el.tag == MyHTML_TAG_TD || el.tag == MyHTML_TAG_TH) pending_space_ = true;
    }
    if (next < el.kids.size()) {
      const Child k = el.kids[next++];
      if (k.elem < 0) {
        text(k.text, el.preformatted);
      } else {
        stack.push_back({k.elem, 0});
      }
      continue;
    }
    if (is_block(el.tag)) paragraph_break();
    stack.pop_back();
  }
}

std::string TextWriter::take() { return std::move(out_); }

std::string collapse(std::string_view s) {
  const std::vector<Elem> none;
  TextWriter w(none, false);
  w.text(s, false);
  return w.take();
}

// Readability's test for a short paragraph worth keeping: a full stop followed by a space or the end.
bool Scorer::ends_sentence(int i) const {
  TextWriter w(elems_, false);
  w.element(i);
  const std::string t = w.take();
  return !t.empty() && (t.back() == '.' || t.find(". ") != std::string::npos);
}

std::string extract_pass(Page& tree, const Flags& flags) {
  apply(tree.elems, flags);
  count_subtrees(tree.elems);
  Scorer scorer(tree.elems);
  scorer.score_all();
  int top = scorer.choose_top();
  if (top < 0) top = tree.body;
  if (top < 0) return {};
  const std::vector<int> body = scorer.gather_body(top);
  uint32_t body_chars = 0;
  for (int part : body) body_chars += tree.elems[part].chars - tree.elems[part].link_chars;
  TextWriter writer(tree.elems, flags.clean_conditionally, body_chars / 3);
  for (int part : body) writer.element(part);
  return writer.take();
}


// One parser per thread, kept: creating one costs more than parsing a page.
class Parser {
 public:
  Parser() {
    html_ = myhtml_create();
    ok_ = html_ && myhtml_init(html_, MyHTML_OPTIONS_PARSE_MODE_SINGLE, 1, 0) == MyHTML_STATUS_OK;
    tree_ = ok_ ? myhtml_tree_create() : nullptr;
    ok_ = ok_ && tree_ && myhtml_tree_init(tree_, html_) == MyHTML_STATUS_OK;
  }
  ~Parser() {
    if (tree_) myhtml_tree_destroy(tree_);
    if (html_) myhtml_destroy(html_);
  }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
  // The document node of `html` parsed, or null; valid until the next parse.
  myhtml_tree_node_t* parse(std::string_view html) {
    if (!ok_) return nullptr;
    if (myhtml_parse(tree_, MyENCODING_UTF_8, html.data(), html.size()) != MyHTML_STATUS_OK) return nullptr;
    return myhtml_tree_get_document(tree_);
  }

 private:
  myhtml_t* html_ = nullptr;
  myhtml_tree_t* tree_ = nullptr;
  bool ok_ = false;
};

// The deepest the element tree gets, estimated from the tags: an upper bound, as
// a close tag counts only when an element of its name is open (a stray one closes
// nothing), and the elements a parser closes by itself (void ones, p, li, td, a
// second <a> ...) are not counted. Comments and the text of raw-text elements
// (script, style, ...) are skipped. O(size).
size_t peak_depth_estimate(std::string_view html) {
  static constexpr std::string_view kNotNesting[] = {
      "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr", "param",
      "p", "li", "td", "tr", "th", "option", "optgroup", "dt", "dd", "a", "nobr", "button", "form", "rb", "rt",
      "rp", "rtc", "tbody", "thead", "tfoot", "colgroup", "caption", "image", "keygen", "frame"};
  static constexpr std::string_view kRawText[] = {"script", "style", "textarea", "title", "xmp", "iframe",
                                                  "noembed", "noframes", "noscript", "plaintext"};
  auto is_name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  };
  std::unordered_map<std::string, size_t> open;
  size_t depth = 0, peak = 0;
  size_t at = 0;
  while ((at = html.find('<', at)) != std::string_view::npos) {
    if (html.compare(at, 4, "<!--") == 0) {
      const size_t end = html.find("-->", at + 4);
      if (end == std::string_view::npos) break;
      at = end + 3;
      continue;
    }
    const bool closing = at + 1 < html.size() && html[at + 1] == '/';
    const size_t name_start = at + 1 + (closing ? 1 : 0);
    size_t name_end = name_start;
    while (name_end < html.size() && is_name_char(html[name_end])) ++name_end;
    if (name_end == name_start || !((html[name_start] | 0x20) >= 'a' && (html[name_start] | 0x20) <= 'z')) {
      ++at;
      continue;
    }
    const std::string name = ascii_lower(html.substr(name_start, name_end - name_start));
    at = name_end;
    if (closing) {
      auto it = open.find(name);
      if (it != open.end() && it->second > 0) {
        --it->second;
        --depth;
      }
      continue;
    }
    if (std::find(std::begin(kNotNesting), std::end(kNotNesting), name) != std::end(kNotNesting)) continue;
    ++open[name];
    peak = std::max(peak, ++depth);
    if (std::find(std::begin(kRawText), std::end(kRawText), name) != std::end(kRawText)) {
      // Its text runs to "</name" (any case): nothing inside is a tag.
      size_t close = at;
      while ((close = html.find("</", close)) != std::string_view::npos &&
             !ascii_iequals(html.substr(close + 2, name.size()), name))
        close += 2;
      if (close == std::string_view::npos) break;
      at = close;
    }
  }
  return peak;
}

}  // namespace

ExtractedPage extract_page(std::string_view utf8_html) {
  ExtractedPage page;
  // The parser's time grows with the square of the nesting depth (13 s for 100,000 nested
  // <div>): pages nested beyond any real page's depth are refused rather than parsed.
  if (peak_depth_estimate(utf8_html) > kMaxOpenTags) {
    page.too_deep = true;
    return page;
  }
  thread_local Parser parser;
  myhtml_tree_node_t* document = parser.parse(utf8_html);
  if (!document) return page;
  Page tree(document);
  page.title = collapse(tree.title);
  // Readability's retries: a pass that finds under 500 characters runs again with one rule
  // less; when all fall short, the longest text wins.
  constexpr size_t kEnoughChars = 500;
  Flags flags;
  for (int pass = 0; pass < 4; ++pass) {
    std::string text = extract_pass(tree, flags);
    if (text.size() > page.text.size()) page.text = std::move(text);
    if (page.text.size() >= kEnoughChars) break;
    if (pass == 0) flags.strip_unlikely = false;
    if (pass == 1) flags.weight_classes = false;
    if (pass == 2) flags.clean_conditionally = false;
  }
  return page;
}

std::string extract_main_text(std::string_view utf8_html) { return extract_page(utf8_html).text; }

}  // namespace zlm::web
