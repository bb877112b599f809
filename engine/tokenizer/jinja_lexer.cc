#include "engine/tokenizer/jinja_lexer.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::jinja {
namespace {

absl::Status Error(int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", std::string(what)));
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) { *out += static_cast<char>(cp); }
  else if (cp < 0x800) { *out += static_cast<char>(0xC0 | (cp >> 6)); *out += static_cast<char>(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12)); *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18)); *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Python string-literal escapes (Jinja2 decodes literals with Python's rules).
absl::Status ReadString(std::string_view src, size_t* pos, int* line, std::string* out) {
  char quote = src[(*pos)++];
  while (*pos < src.size()) {
    char c = src[(*pos)++];
    if (c == quote) return absl::OkStatus();
    if (c == '\n') ++*line;
    if (c != '\\') { *out += c; continue; }
    if (*pos >= src.size()) break;
    char e = src[(*pos)++];
    switch (e) {
      case 'n': *out += '\n'; break;
      case 't': *out += '\t'; break;
      case 'r': *out += '\r'; break;
      case '0': *out += '\0'; break;
      case 'a': *out += '\a'; break;
      case 'b': *out += '\b'; break;
      case 'f': *out += '\f'; break;
      case 'v': *out += '\v'; break;
      case '\\': case '\'': case '"': *out += e; break;
      case '\n': ++*line; break;
      case 'x': case 'u': case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (*pos + n > src.size()) return Error(*line, "truncated escape in string literal");
        uint32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          char h = src[*pos + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return Error(*line, "bad escape in string literal");
          cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        *pos += n;
        AppendUtf8(cp, out);
        break;
      }
      default: *out += '\\'; *out += e; break;
    }
  }
  return Error(*line, "unterminated string literal");
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool strip_next = false;    // a '-' closed the previous tag
    bool trim_newline = false;  // trim_blocks after a block/comment tag
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t open = FindOpen(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text = text.substr(k);
      } else if (trim_newline && !text.empty() && text[0] == '\n') {
        text = text.substr(1);
      }
      int text_line = line_;
      for (size_t k = pos_; k < open; ++k) line_ += src_[k] == '\n';
      if (open == src_.size()) { Emit(TokenKind::kText, text, text_line); break; }
      char kind = src_[open + 1];
      char mod = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (mod == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (mod != '+' && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
        size_t l = text.rfind('\n');
        size_t from = l == std::string::npos ? 0 : l + 1;
        if (l != std::string::npos || line_starting) {
          bool blank = true;
          for (size_t k = from; k < text.size(); ++k) blank &= text[k] == ' ' || text[k] == '\t';
          if (blank) text.resize(from);
        }
      }
      Emit(TokenKind::kText, text, text_line);
      pos_ = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      strip_next = trim_newline = false;
      std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
      if (kind == '#') {
        size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) return Error(line_, "unterminated comment");
        for (size_t k = pos_; k < end; ++k) line_ += src_[k] == '\n';
        strip_next = end > pos_ && src_[end - 1] == '-';
        trim_newline = !strip_next && !(end > pos_ && src_[end - 1] == '+');
        pos_ = end + 2;
      } else {
        Emit(kind == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", line_);
        bool raw = false;
        if (auto s = LexTag(close, &strip_next, &raw); !s.ok()) return s;
        trim_newline = kind == '%' && !strip_next && src_[pos_ - 3] != '+';
        Emit(kind == '{' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", line_);
        if (raw) {
          if (auto s = LexRaw(&strip_next, &trim_newline); !s.ok()) return s;
        }
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
      if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') line_starting = true;
    }
    Emit(TokenKind::kEof, "", line_);
    return std::move(tokens_);
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  void Emit(TokenKind kind, std::string text, int line) {
    if (kind == TokenKind::kText && text.empty()) return;
    tokens_.push_back(Token{kind, std::move(text), line});
  }

  absl::Status LexTag(std::string_view close, bool* strip_next, bool* raw) {
    size_t first = tokens_.size();
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) return Error(line_, absl::StrCat("missing '", std::string(close), "'"));
      if ((src_[pos_] == '-' || src_[pos_] == '+') && src_.compare(pos_ + 1, 2, close) == 0) {
        *strip_next = src_[pos_] == '-';
        pos_ += 3;
        break;
      }
      if (src_.compare(pos_, 2, close) == 0) { pos_ += 2; break; }
      char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        Emit(TokenKind::kName, src_.substr(s, pos_ - s), line_);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t s = pos_;
        bool is_float = false;
        while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
          size_t e = pos_ + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            pos_ = e;
            while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
          }
        }
        std::string num;
        for (size_t k = s; k < pos_; ++k) if (src_[k] != '_') num += src_[k];
        Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, num, line_);
      } else if (c == '\'' || c == '"') {
        std::string value;
        int line = line_;
        if (auto st = ReadString(src_, &pos_, &line_, &value); !st.ok()) return st;
        tokens_.push_back(Token{TokenKind::kString, std::move(value), line});
      } else {
        static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                                     "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",",
                                                     ".", ":", "|"};
        bool found = false;
        for (std::string_view op : kOps) {
          if (src_.compare(pos_, op.size(), op) == 0) {
            Emit(TokenKind::kOp, std::string(op), line_);
            pos_ += op.size();
            found = true;
            break;
          }
        }
        if (!found) return Error(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
    }
    *raw = close == "%}" && tokens_.size() == first + 1 && tokens_[first].kind == TokenKind::kName &&
           tokens_[first].text == "raw";
    if (*raw) tokens_.resize(first - 1);  // drop "{% raw %}" itself
    return absl::OkStatus();
  }

  // After {% raw %}: everything up to {% endraw %} is text.
  absl::Status LexRaw(bool* strip_next, bool* trim_newline) {
    size_t k = pos_;
    while (true) {
      size_t open = src_.find("{%", k);
      if (open == std::string::npos) return Error(line_, "missing {% endraw %}");
      size_t p = open + 2;
      bool strip_before = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) { k = open + 2; continue; }
      p += 6;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      bool strip_after = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      if (src_.compare(p, 2, "%}") != 0) { k = open + 2; continue; }
      std::string text = src_.substr(pos_, open - pos_);
      if (*trim_newline && !text.empty() && text[0] == '\n') text = text.substr(1);
      if (*strip_next) { size_t s = 0; while (s < text.size() && IsSpace(text[s])) ++s; text = text.substr(s); }
      if (strip_before) while (!text.empty() && IsSpace(text.back())) text.pop_back();
      for (size_t q = pos_; q < p + 2; ++q) line_ += src_[q] == '\n';
      tokens_.pop_back();  // the BlockEnd of "{% raw %}"
      Emit(TokenKind::kText, text, line_);
      pos_ = p + 2;
      *strip_next = strip_after;
      *trim_newline = !strip_after;
      return absl::OkStatus();
    }
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  // Jinja2 normalizes newlines and, with keep_trailing_newline off, drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).Run();
}

}  // namespace mlaserve::jinja
