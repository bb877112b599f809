#include "engine/tokenizer/jinja_parser.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja_builtins.h"

namespace mlaserve::jinja {
namespace {

#define JINJA_TRY(lhs, expr)            \
  auto lhs##_or = (expr);               \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = std::move(*lhs##_or)

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  absl::StatusOr<Body> Run() {
    JINJA_TRY(body, ParseBody({}));
    if (Peek().kind != TokenKind::kEof) return Error(absl::StrCat("unexpected '", Peek().text, "'"));
    for (const auto& [name, line] : called_) {
      if (!IsKnownGlobal(name) && !macros_.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat("chat template line ", line,
                                                       ": unsupported function '", name, "'"));
      }
    }
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  const Token& Next() { const Token& t = t_[p_]; if (p_ + 1 < t_.size()) ++p_; return t; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view n, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == n;
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("chat template line ", Peek().line, ": ", std::string(what)));
  }
  absl::Status Expect(std::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", std::string(op), "', got '", Peek().text, "'"));
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) return Error(absl::StrCat("expected a name, got '", Peek().text, "'"));
    return Next().text;
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) return Error(absl::StrCat("expected '%}', got '", Peek().text, "'"));
    Next();
    return absl::OkStatus();
  }

  // Parses statements until a block tag whose keyword is in `ends` (left unconsumed: the
  // current token is then that keyword).
  absl::StatusOr<Body> ParseBody(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == TokenKind::kEof) {
        if (!ends.empty()) return Error(absl::StrCat("missing '{% ", *ends.rbegin(), " %}'"));
        return body;
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>(Stmt{StmtKind::kText, t.line});
        s->text = Next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>(Stmt{StmtKind::kOutput, t.line});
        JINJA_TRY(e, ParseExpr());
        s->expr = std::move(e);
        if (Peek().kind != TokenKind::kVarEnd) return Error(absl::StrCat("expected '}}', got '", Peek().text, "'"));
        Next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        if (Peek(1).kind == TokenKind::kName && ends.count(Peek(1).text)) { Next(); return body; }
        Next();
        JINJA_TRY(s, ParseStatement());
        if (s) body.push_back(std::move(s));
      } else {
        return Error(absl::StrCat("unexpected '", t.text, "'"));
      }
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    int line = Peek().line;
    JINJA_TRY(kw, ExpectName());
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::kBody, line});
    if (kw == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        JINJA_TRY(cond, ParseExpr());
        if (auto st = ExpectBlockEnd(); !st.ok()) return st;
        s->conditions.push_back(std::move(cond));
        JINJA_TRY(body, ParseBody({"elif", "else", "endif"}));
        s->bodies.push_back(std::move(body));
        std::string end = Next().text;
        if (end == "elif") continue;
        if (end == "else") {
          if (auto st = ExpectBlockEnd(); !st.ok()) return st;
          JINJA_TRY(eb, ParseBody({"endif"}));
          Next();
          s->bodies.push_back(std::move(eb));
          s->has_else = true;
        }
        break;
      }
    } else if (kw == "for") {
      s->kind = StmtKind::kFor;
      while (true) {
        JINJA_TRY(n, ExpectName());
        s->targets.push_back(n);
        if (!IsOp(",")) break;
        Next();
      }
      if (!IsName("in")) return Error("expected 'in' in for loop");
      Next();
      JINJA_TRY(iter, ParseOr(/*no_cond=*/true));
      s->expr = std::move(iter);
      if (IsName("if")) {
        Next();
        JINJA_TRY(cond, ParseOr(true));
        s->conditions.push_back(std::move(cond));
      }
      if (IsName("recursive")) return Error("unsupported construct 'for ... recursive'");
      if (auto st = ExpectBlockEnd(); !st.ok()) return st;
      ++loop_depth_;
      JINJA_TRY(body, ParseBody({"else", "endfor"}));
      --loop_depth_;
      s->bodies.push_back(std::move(body));
      if (Next().text == "else") {
        if (auto st = ExpectBlockEnd(); !st.ok()) return st;
        JINJA_TRY(eb, ParseBody({"endfor"}));
        Next();
        s->bodies.push_back(std::move(eb));
        s->has_else = true;
      }
    } else if (kw == "set") {
      JINJA_TRY(n, ExpectName());
      s->targets.push_back(n);
      if (IsOp(".")) {
        Next();
        JINJA_TRY(attr, ExpectName());
        s->targets.push_back(attr);
        s->attribute = true;
      }
      if (IsOp(",")) return Error("unsupported construct 'set' with several targets");
      if (IsOp("=")) {
        Next();
        s->kind = StmtKind::kSet;
        JINJA_TRY(e, ParseTupleOrExpr());
        s->expr = std::move(e);
      } else {
        if (s->attribute) return Error("expected '=' in set");
        s->kind = StmtKind::kSetBlock;
        if (auto st = ExpectBlockEnd(); !st.ok()) return st;
        JINJA_TRY(body, ParseBody({"endset"}));
        Next();
        s->bodies.push_back(std::move(body));
      }
    } else if (kw == "macro") {
      s->kind = StmtKind::kMacro;
      JINJA_TRY(n, ExpectName());
      s->targets.push_back(n);
      macros_.insert(n);
      if (auto st = Expect("("); !st.ok()) return st;
      while (!IsOp(")")) {
        JINJA_TRY(p, ExpectName());
        ExprPtr def;
        if (IsOp("=")) {
          Next();
          JINJA_TRY(d, ParseExpr());
          def = std::move(d);
        }
        s->params.emplace_back(p, std::move(def));
        if (!IsOp(",")) break;
        Next();
      }
      if (auto st = Expect(")"); !st.ok()) return st;
      if (auto st = ExpectBlockEnd(); !st.ok()) return st;
      int saved = loop_depth_;
      loop_depth_ = 0;
      JINJA_TRY(body, ParseBody({"endmacro"}));
      loop_depth_ = saved;
      Next();
      s->bodies.push_back(std::move(body));
    } else if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) return Error(absl::StrCat("'", kw, "' outside a loop"));
      s->kind = kw == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (kw == "generation") {  // transformers' AssistantTracker: renders its body
      if (auto st = ExpectBlockEnd(); !st.ok()) return st;
      JINJA_TRY(body, ParseBody({"endgeneration"}));
      Next();
      s->bodies.push_back(std::move(body));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template line ", line, ": unsupported construct '", kw, "'"));
    }
    if (auto st = ExpectBlockEnd(); !st.ok()) return st;
    return s;
  }

  ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseTupleOrExpr() {
    int line = Peek().line;
    JINJA_TRY(first, ParseExpr());
    if (!IsOp(",")) return first;
    auto t = Make(ExprKind::kTuple, line);
    t->args.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (Peek().kind == TokenKind::kBlockEnd || Peek().kind == TokenKind::kVarEnd) break;
      JINJA_TRY(e, ParseExpr());
      t->args.push_back(std::move(e));
    }
    return t;
  }

  absl::StatusOr<ExprPtr> ParseExpr() { return ParseOr(false); }

  // or-expression followed, unless no_cond, by "if cond [else expr]".
  absl::StatusOr<ExprPtr> ParseOr(bool no_cond) {
    int line = Peek().line;
    JINJA_TRY(lhs, ParseAnd());
    while (IsName("or")) {
      Next();
      JINJA_TRY(rhs, ParseAnd());
      auto e = Make(ExprKind::kOr, line);
      e->args.push_back(std::move(lhs));
      e->args.push_back(std::move(rhs));
      lhs = std::move(e);
    }
    if (no_cond) return lhs;
    while (IsName("if")) {
      Next();
      auto e = Make(ExprKind::kCond, line);
      JINJA_TRY(cond, ParseOr(true));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(lhs));
      if (IsName("else")) {
        Next();
        JINJA_TRY(other, ParseOr(false));
        e->args.push_back(std::move(other));
      } else {
        e->args.push_back(nullptr);
      }
      lhs = std::move(e);
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    int line = Peek().line;
    JINJA_TRY(lhs, ParseNot());
    while (IsName("and")) {
      Next();
      JINJA_TRY(rhs, ParseNot());
      auto e = Make(ExprKind::kAnd, line);
      e->args.push_back(std::move(lhs));
      e->args.push_back(std::move(rhs));
      lhs = std::move(e);
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      int line = Next().line;
      JINJA_TRY(x, ParseNot());
      auto e = Make(ExprKind::kUnary, line);
      e->name = "not";
      e->args.push_back(std::move(x));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    int line = Peek().line;
    JINJA_TRY(lhs, ParseBinary(0));
    while (true) {
      std::string op;
      if (Peek().kind == TokenKind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next(); Next();
        op = "not in";
      } else {
        return lhs;
      }
      JINJA_TRY(rhs, ParseBinary(0));
      auto e = Make(ExprKind::kBinary, line);
      e->name = op;
      e->args.push_back(std::move(lhs));
      e->args.push_back(std::move(rhs));
      lhs = std::move(e);
    }
  }

  // Jinja2's levels: + - (math1), ~ (concat), * / // % (math2), ** (pow).
  absl::StatusOr<ExprPtr> ParseBinary(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == 4) return ParseUnary();
    int line = Peek().line;
    JINJA_TRY(lhs, ParseBinary(level + 1));
    while (true) {
      std::string op;
      for (const auto& o : kLevels[level]) if (IsOp(o)) op = o;
      if (op.empty()) return lhs;
      Next();
      JINJA_TRY(rhs, ParseBinary(level + 1));
      auto e = Make(ExprKind::kBinary, line);
      e->name = op;
      e->args.push_back(std::move(lhs));
      e->args.push_back(std::move(rhs));
      lhs = std::move(e);
    }
  }

  absl::StatusOr<ExprPtr> ParseUnary() {
    int line = Peek().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      std::string op = Next().text;
      JINJA_TRY(x, ParseUnary());
      node = Make(ExprKind::kUnary, line);
      node->name = op;
      node->args.push_back(std::move(x));
      return node;  // Jinja2: filters after "-x" bind to the operand's caller (close enough)
    }
    JINJA_TRY(prim, ParsePrimary());
    JINJA_TRY(post, ParsePostfix(std::move(prim)));
    return ParseFilters(std::move(post));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    int line = t.line;
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (Peek().kind == TokenKind::kString) s += Next().text;
      auto e = Make(ExprKind::kLiteral, line);
      e->value = Value::Str(s);
      return e;
    }
    if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
      auto e = Make(ExprKind::kLiteral, line);
      std::string text = Next().text;
      if (t.kind == TokenKind::kInt) {
        e->value = Value::Int(std::strtoll(text.c_str(), nullptr, 10));
      } else {
        e->value = Value::Float(std::strtod(text.c_str(), nullptr));
      }
      return e;
    }
    if (t.kind == TokenKind::kName) {
      std::string n = Next().text;
      auto e = Make(ExprKind::kLiteral, line);
      if (n == "true" || n == "True") { e->value = Value::Bool(true); return e; }
      if (n == "false" || n == "False") { e->value = Value::Bool(false); return e; }
      if (n == "none" || n == "None") { e->value = Value::None(); return e; }
      e->kind = ExprKind::kName;
      e->name = n;
      return e;
    }
    if (IsOp("(")) {
      Next();
      if (IsOp(")")) { Next(); return Make(ExprKind::kTuple, line); }
      JINJA_TRY(first, ParseExpr());
      if (IsOp(")")) { Next(); return first; }
      auto tuple = Make(ExprKind::kTuple, line);
      tuple->args.push_back(std::move(first));
      while (IsOp(",")) {
        Next();
        if (IsOp(")")) break;
        JINJA_TRY(x, ParseExpr());
        tuple->args.push_back(std::move(x));
      }
      if (auto st = Expect(")"); !st.ok()) return st;
      return tuple;
    }
    if (IsOp("[") || IsOp("{")) {
      bool dict = IsOp("{");
      Next();
      auto e = Make(dict ? ExprKind::kDict : ExprKind::kList, line);
      std::string close = dict ? "}" : "]";
      while (!IsOp(close)) {
        JINJA_TRY(x, ParseExpr());
        e->args.push_back(std::move(x));
        if (dict) {
          if (auto st = Expect(":"); !st.ok()) return st;
          JINJA_TRY(v, ParseExpr());
          e->args.push_back(std::move(v));
        }
        if (!IsOp(",")) break;
        Next();
      }
      if (auto st = Expect(close); !st.ok()) return st;
      return e;
    }
    return Error(absl::StrCat("unexpected '", t.text, "' in expression"));
  }

  absl::Status ParseArgs(Expr* e) {
    if (auto st = Expect("("); !st.ok()) return st;
    while (!IsOp(")")) {
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        JINJA_TRY(v, ParseExpr());
        e->kwargs.emplace_back(key, std::move(v));
      } else {
        JINJA_TRY(v, ParseExpr());
        e->args.push_back(std::move(v));
      }
      if (!IsOp(",")) break;
      Next();
    }
    return Expect(")");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      int line = Peek().line;
      if (IsOp(".")) {
        Next();
        std::string attr;
        if (Peek().kind == TokenKind::kInt) {
          attr = Next().text;
        } else {
          JINJA_TRY(a, ExpectName());
          attr = a;
        }
        if (IsOp("(")) {
          if (!IsKnownMethod(attr)) return Error(absl::StrCat("unsupported method '", attr, "'"));
          auto e = Make(ExprKind::kMethod, line);
          e->name = attr;
          e->args.push_back(std::move(node));
          if (auto st = ParseArgs(e.get()); !st.ok()) return st;
          node = std::move(e);
        } else {
          auto e = Make(ExprKind::kAttr, line);
          e->name = attr;
          e->args.push_back(std::move(node));
          node = std::move(e);
        }
      } else if (IsOp("[")) {
        Next();
        ExprPtr parts[3];
        int colons = 0;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            JINJA_TRY(x, ParseExpr());
            parts[k] = std::move(x);
          }
          if (k < 2 && IsOp(":")) { Next(); ++colons; } else { break; }
        }
        if (auto st = Expect("]"); !st.ok()) return st;
        auto e = Make(colons ? ExprKind::kSlice : ExprKind::kItem, line);
        e->args.push_back(std::move(node));
        if (!colons && !parts[0]) return Error("empty subscript");
        for (int k = 0; k < (colons ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
        node = std::move(e);
      } else if (IsOp("(")) {
        if (node->kind != ExprKind::kName) return Error("unsupported call of a computed value");
        called_.emplace_back(node->name, line);
        auto e = Make(ExprKind::kCall, line);
        e->args.push_back(std::move(node));
        if (auto st = ParseArgs(e.get()); !st.ok()) return st;
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node) {
    while (true) {
      int line = Peek().line;
      if (IsOp("|")) {
        Next();
        JINJA_TRY(n, ExpectName());
        if (!IsKnownFilter(n)) return Error(absl::StrCat("unsupported filter '", n, "'"));
        auto e = Make(ExprKind::kFilter, line);
        e->name = n;
        e->args.push_back(std::move(node));
        if (IsOp("(")) {
          if (auto st = ParseArgs(e.get()); !st.ok()) return st;
        }
        node = std::move(e);
      } else if (IsName("is")) {
        Next();
        auto e = Make(ExprKind::kTest, line);
        if (IsName("not")) { Next(); e->negate = true; }
        std::string n;
        if (Peek().kind == TokenKind::kName) {
          n = Next().text;
        } else if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
          n = Next().text;
        } else {
          return Error("expected a test name after 'is'");
        }
        if (!IsKnownTest(n)) return Error(absl::StrCat("unsupported test '", n, "'"));
        e->name = n;
        e->args.push_back(std::move(node));
        if (IsOp("(")) {
          if (auto st = ParseArgs(e.get()); !st.ok()) return st;
        } else if (Peek().kind == TokenKind::kString || Peek().kind == TokenKind::kInt ||
                   Peek().kind == TokenKind::kFloat ||
                   (Peek().kind == TokenKind::kName && !IsName("and") && !IsName("or") &&
                    !IsName("if") && !IsName("else") && !IsName("in") && !IsName("not") &&
                    !IsName("is"))) {
          JINJA_TRY(arg, ParsePrimary());
          e->args.push_back(std::move(arg));
        }
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).Run(); }

}  // namespace mlaserve::jinja
