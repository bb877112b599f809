// Syntax tree of the chat-template interpreter.
#ifndef MLASERVE_ENGINE_TOKENIZER_JINJA_AST_H_
#define MLASERVE_ENGINE_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja_value.h"

namespace mlaserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value...
  kAttr,      // args[0] . name
  kItem,      // args[0] [ args[1] ]
  kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts absent)
  kCall,      // args[0] ( args[1..] , kwargs )
  kMethod,    // args[0] . name ( args[1..], kwargs )
  kFilter,    // args[0] | name ( args[1..], kwargs )
  kTest,      // args[0] is [not] name ( args[1..] ); negate
  kUnary,     // op args[0]: "not", "-", "+"
  kBinary,    // args[0] op args[1]
  kAnd, kOr,
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBody };

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // kText
  ExprPtr expr;                     // kOutput, kSet value, kFor iterable
  std::vector<ExprPtr> conditions;  // kIf: one per branch; kFor: the inline filter (optional)
  std::vector<Body> bodies;         // kIf: one per branch (+ else); kFor: body (+ else)
  std::vector<std::string> targets; // kFor loop variables; kSet: name (and attribute); kMacro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: parameters and defaults
  bool has_else = false;
  bool attribute = false;           // kSet: target is name.attr
};

}  // namespace mlaserve::jinja

#endif  // MLASERVE_ENGINE_TOKENIZER_JINJA_AST_H_
