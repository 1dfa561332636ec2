// Internal: a strict JSON pull parser over text held by the caller, for formats read
// in bulk (a fleet's miss reports: hundreds of megabytes), where building a document
// tree first would cost most of the time. RFC 8259: no comments, no trailing commas,
// strings must be UTF-8; nesting is limited. Values are read in document order:
//
//   JsonPull p(text);
//   if (p.BeginObject())
//     for (std::string_view k; p.NextMember(k);) { if (k == "n") p.Number(x); else p.Skip(); }
//   p.End();  // only whitespace may follow
//
// The first error is kept (error(), with the byte offset); after it every call fails.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace cliffguard::detail {

class JsonPull {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject, kInvalid };
  static constexpr size_t kMaxDepth = 64;

  explicit JsonPull(std::string_view text) : s_(text) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // The kind of the next value (kInvalid at the end of the text or after an error).
  Kind Peek() {
    if (!ok()) return Kind::kInvalid;
    Ws();
    if (i_ >= s_.size()) return Fail("unexpected end of text"), Kind::kInvalid;
    switch (s_[i_]) {
      case '{': return Kind::kObject;
      case '[': return Kind::kArray;
      case '"': return Kind::kString;
      case 't': case 'f': return Kind::kBool;
      case 'n': return Kind::kNull;
      default:
        if (s_[i_] == '-' || (s_[i_] >= '0' && s_[i_] <= '9')) return Kind::kNumber;
        return Fail("expected a value"), Kind::kInvalid;
    }
  }
  // The next value's text, shortened, for error messages (does not consume it).
  std::string Preview() {
    Ws();
    std::string_view v = s_.substr(std::min(i_, s_.size()), 32);
    const size_t end = v.find_first_of(",}]\n");
    return std::string(v.substr(0, end));
  }

  bool BeginObject() { return Open('{'); }
  bool BeginArray() { return Open('['); }
  // The next member's key of the innermost object (false at its end, or on error).
  bool NextMember(std::string_view& key) {
    if (!Continue('}')) return false;
    if (!StringView(key)) return false;
    Ws();
    if (i_ >= s_.size() || s_[i_] != ':') return Fail("expected ':' after an object key");
    ++i_;
    return true;
  }
  // Whether the innermost array has another element (false at its end, or on error).
  bool NextElement() { return Continue(']'); }

  // A string as a view: into the text when it holds no escape, else into a buffer
  // that the next call reuses.
  bool StringView(std::string_view& out) {
    Ws();
    if (!ok() || i_ >= s_.size() || s_[i_] != '"') return Fail("expected a string");
    size_t j = i_ + 1;
    while (j < s_.size() && s_[j] != '"' && s_[j] != '\\' && static_cast<unsigned char>(s_[j]) >= 0x20 &&
           static_cast<unsigned char>(s_[j]) < 0x80)
      ++j;
    if (j < s_.size() && s_[j] == '"') {
      out = s_.substr(i_ + 1, j - i_ - 1);
      i_ = j + 1;
      return true;
    }
    if (!String(key_)) return false;
    out = key_;
    return true;
  }
  bool String(std::string& out) {
    out.clear();
    Ws();
    if (!ok() || i_ >= s_.size() || s_[i_] != '"') return Fail("expected a string");
    ++i_;
    for (;;) {
      size_t j = i_;
      while (j < s_.size() && s_[j] != '"' && s_[j] != '\\' && static_cast<unsigned char>(s_[j]) >= 0x20 &&
             static_cast<unsigned char>(s_[j]) < 0x80)
        ++j;
      out.append(s_.data() + i_, j - i_);
      i_ = j;
      if (i_ >= s_.size()) return Fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return Fail("control character in a string");
      if (c >= 0x80) {
        const size_t n = Utf8Length(s_.substr(i_));
        if (!n) return Fail("invalid UTF-8 in a string");
        out.append(s_.data() + i_, n);
        i_ += n;
        continue;
      }
      if (!Escape(out)) return false;
    }
  }
  // A number: `integer` when it has no fraction or exponent and fits 64 bits (then
  // `i` holds it: `negative` tells its sign, `u` its magnitude); `d` always.
  struct Number {
    double d = 0;
    bool integer = false, negative = false;
    uint64_t u = 0;
  };
  bool ReadNumber(Number& n) {
    Ws();
    if (!ok() || i_ >= s_.size()) return Fail("expected a number");
    const size_t start = i_;
    n = Number{};
    if (s_[i_] == '-') {
      n.negative = true;
      ++i_;
    }
    const size_t digits = i_;
    if (i_ < s_.size() && s_[i_] == '0') ++i_;
    else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') Digits();
    else return Fail("expected a number");
    bool fraction = false;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!Digits()) return Fail("expected digits after '.'");
      fraction = true;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!Digits()) return Fail("expected digits in an exponent");
      fraction = true;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    if (!fraction) {
      auto [p, ec] = std::from_chars(s_.data() + digits, last, n.u);
      n.integer = ec == std::errc() && p == last && (!n.negative || n.u <= uint64_t{1} << 63);
      if (n.integer && n.u < (uint64_t{1} << 53)) {  // exact as a double
        n.d = n.negative ? -double(n.u) : double(n.u);
        return true;
      }
    }
    if (std::from_chars(first, last, n.d).ec != std::errc() || !std::isfinite(n.d))
      return Fail("number out of range");
    return true;
  }
  bool Bool(bool& b) {
    Ws();
    if (Literal("true")) return b = true;
    if (Literal("false")) return !(b = false);
    return Fail("expected true or false");
  }
  // Skips one value of any kind.
  bool Skip() {
    switch (Peek()) {
      case Kind::kObject: {
        if (!BeginObject()) return false;
        for (std::string_view k; NextMember(k);)
          if (!Skip()) return false;
        return ok();
      }
      case Kind::kArray: {
        if (!BeginArray()) return false;
        while (NextElement())
          if (!Skip()) return false;
        return ok();
      }
      case Kind::kString: return String(scratch_);
      case Kind::kNumber: {
        Number n;
        return ReadNumber(n);
      }
      case Kind::kBool: {
        bool b;
        return Bool(b);
      }
      case Kind::kNull: return Literal("null") || Fail("expected null");
      default: return Fail("expected a value");
    }
  }
  // After the top-level value: only whitespace may follow.
  bool End() {
    Ws();
    if (ok() && i_ != s_.size()) return Fail("unexpected text after the value");
    return ok();
  }

 private:
  bool Fail(std::string_view what) {
    if (error_.empty()) error_ = fmt::format("{} at byte {}", what, i_);
    return false;
  }
  void Ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool Digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool Literal(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool Open(char c) {
    Ws();
    if (!ok() || i_ >= s_.size() || s_[i_] != c) return Fail(c == '{' ? "expected an object" : "expected an array");
    if (first_.size() >= kMaxDepth) return Fail("nested too deeply");
    ++i_;
    first_.push_back(true);
    return true;
  }
  // Before an element or member: its separator; false (and the container closed) at `close`.
  bool Continue(char close) {
    if (!ok() || first_.empty()) return Fail("no open container");
    Ws();
    if (i_ < s_.size() && s_[i_] == close) {
      ++i_;
      first_.pop_back();
      return false;
    }
    if (!first_.back()) {
      if (i_ >= s_.size() || s_[i_] != ',') return Fail(fmt::format("expected ',' or '{}'", close));
      ++i_;
      Ws();
    }
    first_.back() = false;
    if (i_ >= s_.size()) return Fail("unexpected end of text");
    return true;
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool Hex4(uint32_t& v) {
    if (i_ + 4 > s_.size()) return Fail("short \\u escape");
    v = 0;
    for (int k = 0; k < 4; ++k) {
      const int h = Hex(s_[i_ + size_t(k)]);
      if (h < 0) return Fail("bad \\u escape");
      v = v * 16 + uint32_t(h);
    }
    i_ += 4;
    return true;
  }
  bool Escape(std::string& out) {
    ++i_;  // the backslash
    if (i_ >= s_.size()) return Fail("unterminated string");
    const char e = s_[i_++];
    switch (e) {
      case '"': out.push_back('"'); return true;
      case '\\': out.push_back('\\'); return true;
      case '/': out.push_back('/'); return true;
      case 'b': out.push_back('\b'); return true;
      case 'f': out.push_back('\f'); return true;
      case 'n': out.push_back('\n'); return true;
      case 'r': out.push_back('\r'); return true;
      case 't': out.push_back('\t'); return true;
      case 'u': break;
      default: return Fail("bad escape in a string");
    }
    uint32_t cp = 0;
    if (!Hex4(cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail("lone low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t lo = 0;
      if (s_.substr(i_, 2) != "\\u") return Fail("lone high surrogate");
      i_ += 2;
      if (!Hex4(lo)) return false;
      if (lo < 0xDC00 || lo > 0xDFFF) return Fail("bad surrogate pair");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(char(0xE0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (cp >> 18)));
      out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
    return true;
  }
  // The length of the well-formed UTF-8 sequence at the start of s, or 0.
  static size_t Utf8Length(std::string_view s) {
    const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
    const unsigned c = b(0);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (b(1) < lo || b(1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
      if (b(k) < 0x80 || b(k) > 0xBF) return 0;
    return n;
  }

 public:
  // Shared with the writer of the same formats.
  static size_t Utf8SequenceLength(std::string_view s) { return Utf8Length(s); }

 private:
  std::string_view s_;
  size_t i_ = 0;
  std::vector<bool> first_;  // per open container: no element read yet
  std::string key_, scratch_;
  std::string error_;
};

}  // namespace cliffguard::detail
