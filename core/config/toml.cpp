// The one C++ file in core: toml++ 3.3 parses, and the result is copied at once into the
// plain C tree of toml.h (malloc'd), so no C++ object or exception crosses into C.
// toml++ is used header-only here: the implementation is compiled into this translation
// unit, so core links no extra library.
#define TOML_EXCEPTIONS 0
#define TOML_HEADER_ONLY 1
#define TOML_ENABLE_FORMATTERS 1
#include <toml++/toml.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

extern "C" {
#include "config/toml.h"
#include "weir/status.h"
}

namespace {

char *dup_str(std::string_view s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (!p) return nullptr;
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  return p;
}

weir_toml_node *new_node(weir_toml_type t, const toml::node &src) {
  auto *n = static_cast<weir_toml_node *>(std::calloc(1, sizeof(weir_toml_node)));
  if (!n) return nullptr;
  n->type = t;
  n->line = static_cast<int>(src.source().begin.line);
  n->column = static_cast<int>(src.source().begin.column);
  return n;
}

weir_toml_node *convert(const toml::node &src);

// Appends converted children; false when out of memory.
bool add_item(weir_toml_node *parent, weir_toml_node *child) {
  if (!child) return false;
  auto **items = static_cast<weir_toml_node **>(
      std::realloc(parent->items, sizeof(weir_toml_node *) * (size_t)(parent->num_items + 1)));
  if (!items) {
    weir_toml_free(child);
    return false;
  }
  parent->items = items;
  parent->items[parent->num_items++] = child;
  return true;
}

// toml++ refuses inline tables and arrays nested deeper than 256 when it parses, but dotted
// keys (`a.b.c... = 1`) nest tables without that cap, and weir prints a plugin option's
// nested tables inline: such a file loaded and its printed form did not (found by fuzz_toml).
// No configuration needs more than a few levels; 64 keeps the printed form far below 256.
constexpr int kMaxDepth = 64;

// The first node nested deeper than kMaxDepth tables or arrays, or nullptr.
const toml::node *too_deep(const toml::node &n, int depth) {
  if (depth > kMaxDepth) return &n;
  if (const toml::table *t = n.as_table()) {
    for (auto &&[k, v] : *t)
      if (const toml::node *d = too_deep(v, depth + 1)) return d;
  } else if (const toml::array *a = n.as_array()) {
    for (auto &&v : *a)
      if (const toml::node *d = too_deep(v, depth + 1)) return d;
  }
  return nullptr;
}

weir_toml_node *convert(const toml::node &src) {
  weir_toml_node *n = nullptr;
  if (const toml::table *t = src.as_table()) {
    n = new_node(WEIR_TOML_TABLE, src);
    if (!n) return nullptr;
    for (auto &&[k, v] : *t) {
      weir_toml_node *c = convert(v);
      if (c) {
        c->key = dup_str(k.str());
        // A key's own position is more useful than the value's for "unknown key" messages.
        if (k.source().begin.line) {
          c->line = static_cast<int>(k.source().begin.line);
          c->column = static_cast<int>(k.source().begin.column);
        }
      }
      if (!c || !c->key || !add_item(n, c)) {
        if (c && !c->key) weir_toml_free(c);
        weir_toml_free(n);
        return nullptr;
      }
    }
  } else if (const toml::array *a = src.as_array()) {
    n = new_node(WEIR_TOML_ARRAY, src);
    if (!n) return nullptr;
    for (auto &&v : *a) {
      if (!add_item(n, convert(v))) {
        weir_toml_free(n);
        return nullptr;
      }
    }
  } else if (auto s = src.as_string()) {
    n = new_node(WEIR_TOML_STRING, src);
    if (n && !(n->s = dup_str(s->get()))) {
      weir_toml_free(n);
      n = nullptr;
    }
  } else if (auto i = src.as_integer()) {
    n = new_node(WEIR_TOML_INT, src);
    if (n) n->i = i->get();
  } else if (auto f = src.as_floating_point()) {
    n = new_node(WEIR_TOML_FLOAT, src);
    if (n) n->f = f->get();
  } else if (auto b = src.as_boolean()) {
    n = new_node(WEIR_TOML_BOOL, src);
    if (n) n->b = b->get() ? 1 : 0;
  } else {
    // Dates and times: no core key takes one, keep the text for messages.
    std::ostringstream os;
    src.visit([&os](auto &&v) {
      if constexpr (toml::is_date<decltype(v)> || toml::is_time<decltype(v)> ||
                    toml::is_date_time<decltype(v)>)
        os << v;
    });
    n = new_node(WEIR_TOML_DATETIME, src);
    if (n && !(n->s = dup_str(os.str()))) {
      weir_toml_free(n);
      n = nullptr;
    }
  }
  return n;
}

// toml++'s non-ASCII horizontal white space (the code points its table answers "yes" for).
static bool nonascii_blank(uint32_t cp) {
  return cp == 0xA0 || cp == 0x1680 || cp == 0x180E || (cp >= 0x2000 && cp <= 0x200B) ||
         cp == 0x202F || cp == 0x205F || cp == 0x2060 || cp == 0x3000 || cp == 0xFEFF;
}

// Whether c is one of toml++'s value terminators, which end a bare value's read-ahead (NUL is
// not: counting it in would only make more text look like a string).
static bool value_terminator(char c) { return c && std::strchr(" \t\r\n]},#", c); }

// Whether the quote at t[i] starts a string for toml++. A value that starts with a digit, '+'
// or '-' is read ahead up to the next terminator, quotes, '=', '[' and '{' included, so a quote
// inside such a run (`x = 1'...'`, `x = 1.'...'`, `x = 0["""...`) is no string; nor is a quote
// glued to a bare character other than '=', '[', '{' or a key's '.'. Valid TOML opens strings
// only at those places, so this refuses nothing valid but a quoted key after a numeric key.
static bool opens_string(std::string_view t, size_t i) {
  size_t b = i;
  while (b > 0 && !value_terminator(t[b - 1])) b--;
  if (b == i) return true;
  // Values start at the run's start and after '=', '[' or '{' inside it.
  for (size_t k = b; k < i; k++) {
    const char c = t[k];
    const bool starts = k == b || std::strchr("=[{", t[k - 1]);
    if (starts && (std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-'))
      return false;
  }
  return std::strchr("=[{.", t[i - 1]) != nullptr;
}

// toml++ 3.3 (Debian 12's) classifies code points through a generated table with holes: its
// is_non_ascii_horizontal_whitespace() reaches __builtin_unreachable() for U+00A1..U+0499,
// U+2C5E..U+3057 (but U+3000) and U+FB26..U+FEFE (undefined behaviour, found by fuzz_toml).
// The parser asks that question about every character between tokens, after a backslash in
// a basic string, and while skipping the white space after a line-ending backslash. Outside
// strings such a character is an error in TOML anyway; the escape and line-ending cases are refused too, with a message saying why.
// Returns 0, or the byte offset + 1 of the first such character and sets *in_string.
size_t find_unsafe_codepoint(std::string_view t, int *in_string) {
  enum { NORMAL, COMMENT, BASIC, LITERAL, ML_BASIC, ML_LITERAL } st = NORMAL;
  bool escaped = false, skipping = false;
  const size_t n = t.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xC2 && c <= 0xDF && i + 1 < n) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(t[i + 1]) & 0x3Fu);
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF && i + 2 < n) {
      cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(t[i + 1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(t[i + 2]) & 0x3Fu);
      len = 3;
    }
    // The table's blocks 0, 11 and 63 (of 0x3FA code points from U+00A0) have no case.
    const bool unsafe = len > 1 && ((cp >= 0xA1 && cp <= 0x499) ||
                                    (cp >= 0x2C5E && cp <= 0x3057 && cp != 0x3000) ||
                                    (cp >= 0xFB26 && cp <= 0xFEFE));
    auto at = [&](const char *s) { return t.compare(i, std::strlen(s), s) == 0; };
    switch (st) {
    case NORMAL:
      if (unsafe) return *in_string = 0, i + 1;
      if (c == '#') st = COMMENT;
      else if ((c == '"' || c == '\'') && !opens_string(t, i)) break;
      else if (at("\"\"\"")) st = ML_BASIC, len = 3;
      else if (c == '"') st = BASIC;
      else if (at("'''")) st = ML_LITERAL, len = 3;
      else if (c == '\'') st = LITERAL;
      break;
    case COMMENT:
      if (c == '\n') st = NORMAL;
      break;
    case LITERAL:
      if (c == '\'' || c == '\n') st = NORMAL;
      break;
    case ML_LITERAL:
      if (at("'''")) {
        st = NORMAL;
        len = 3;
        while (i + len < n && t[i + len] == '\'' && len < 5) len++;
      }
      break;
    case BASIC:
    case ML_BASIC:
      if (skipping) {
        /* toml++ skips its non-ASCII blanks here too (U+FEFF among them), and goes on asking. */
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || (len > 1 && nonascii_blank(cp)))
          break;
        skipping = false;
        if (unsafe) return *in_string = 1, i + 1;
      }
      if (escaped) {
        escaped = false;
        if (unsafe) return *in_string = 1, i + 1;
        if (st == ML_BASIC && (c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
                               (len > 1 && nonascii_blank(cp))))
          skipping = true;
        break;
      }
      if (c == '\\') escaped = true;
      else if (st == BASIC && (c == '"' || c == '\n')) st = NORMAL;
      else if (st == ML_BASIC && at("\"\"\"")) {
        st = NORMAL;
        len = 3;
        while (i + len < n && t[i + len] == '"' && len < 5) len++;
      }
      break;
    }
    i += len;
  }
  return 0;
}

int parse_common(std::string_view text, const char *source, weir_toml_node **out, char *err,
                 size_t errlen) {
  int in_string = 0;
  if (size_t at = find_unsafe_codepoint(text, &in_string)) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < at; i++) {
      if (text[i] == '\n') line++, col = 1;
      else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) col++;
    }
    std::snprintf(err, errlen, "%s:%zu:%zu: %s", source, line, col,
                  in_string ? "this character cannot follow a backslash (escape sequences and "
                              "line-ending backslashes take ASCII only)"
                            : "unexpected character outside a string (keys and values other "
                              "than strings are ASCII)");
    return WEIR_E_FORMAT;
  }
  try {
    toml::parse_result r = toml::parse(text, std::string_view(source));
    if (!r) {
      const toml::parse_error &e = r.error();
      std::snprintf(err, errlen, "%s:%u:%u: %.*s", source, (unsigned)e.source().begin.line,
                    (unsigned)e.source().begin.column, (int)e.description().size(),
                    e.description().data());
      /* toml++ quotes the offending character as it is, which may be a line break or a
       * control byte: the message stays one printable line. */
      for (char *c = err; c && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
      return WEIR_E_FORMAT;
    }
    if (const toml::node *d = too_deep(r.table(), 0)) {
      std::snprintf(err, errlen, "%s:%u:%u: nested more than %d tables or arrays deep", source,
                    (unsigned)d->source().begin.line, (unsigned)d->source().begin.column,
                    kMaxDepth);
      return WEIR_E_FORMAT;
    }
    weir_toml_node *root = convert(r.table());
    if (!root) {
      std::snprintf(err, errlen, "%s: out of memory", source);
      return WEIR_E_NOMEM;
    }
    root->line = root->column = 0;
    *out = root;
    return WEIR_OK;
  } catch (...) {
    std::snprintf(err, errlen, "%s: out of memory", source);
    return WEIR_E_NOMEM;
  }
}

}  // namespace

extern "C" int weir_toml_parse_string(const char *text, const char *source,
                                      weir_toml_node **out, char *err, size_t errlen) {
  return parse_common(text ? std::string_view(text) : std::string_view(),
                      source ? source : "<string>", out, err, errlen);
}

extern "C" int weir_toml_parse_file(const char *path, weir_toml_node **out, char *err,
                                    size_t errlen) {
  std::FILE *f = std::fopen(path, "rb");
  if (!f) {
    std::snprintf(err, errlen, "%s: cannot open: %s", path, std::strerror(errno));
    return WEIR_E_IO;
  }
  std::string text;
  char buf[65536];
  size_t n;
  int rc = WEIR_OK;
  try {
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  } catch (...) {
    rc = WEIR_E_NOMEM;
  }
  if (rc == WEIR_OK && std::ferror(f)) {
    std::snprintf(err, errlen, "%s: read error: %s", path, std::strerror(errno));
    rc = WEIR_E_IO;
  }
  std::fclose(f);
  if (rc == WEIR_E_NOMEM) std::snprintf(err, errlen, "%s: out of memory", path);
  if (rc != WEIR_OK) return rc;
  return parse_common(text, path, out, err, errlen);
}

extern "C" int weir_toml_parse_value(const char *text, weir_toml_node **out) {
  // A value alone is parsed as the right-hand side of one key; a second key or anything
  // after the value makes the document differ from one entry, which we refuse.
  if (!text || std::strchr(text, '\n')) return WEIR_E_FORMAT;
  char err[256];
  weir_toml_node *root = nullptr;
  std::string doc;
  try {
    doc = std::string("v = ") + text + "\n";
  } catch (...) {
    return WEIR_E_NOMEM;
  }
  int rc = parse_common(doc, "<value>", &root, err, sizeof err);
  if (rc != WEIR_OK) return rc;
  if (root->num_items != 1 || std::strcmp(root->items[0]->key, "v") != 0) {
    weir_toml_free(root);
    return WEIR_E_FORMAT;
  }
  weir_toml_node *v = root->items[0];
  root->num_items = 0;
  weir_toml_free(root);
  std::free(v->key);
  v->key = nullptr;
  v->line = v->column = 0;
  *out = v;
  return WEIR_OK;
}
