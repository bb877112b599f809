// Regex compilation to a backtracking program (see tokenizer_regex.h).

#include "engine/tokenizer/regex.h"

#include <utility>

#include "absl/status/status.h"
#include "engine/tokenizer/regex_ast.h"

namespace mlaserve::tokenizer_internal {
namespace {

using Inst = Regex::Inst;
using Op = Inst::Op;
using Greed = Inst::Greed;
using Node = RegexNode;

bool Nullable(const Node& node) {
  switch (node.kind) {
    case Node::Kind::kSet:
      return false;
    case Node::Kind::kConcat:
      for (const auto& child : node.children) {
        if (!Nullable(*child)) return false;
      }
      return true;
    case Node::Kind::kAlternate:
      for (const auto& child : node.children) {
        if (Nullable(*child)) return true;
      }
      return false;
    case Node::Kind::kRepeat:
      return node.min == 0 || Nullable(*node.children[0]);
    default:
      return true;
  }
}

// Collects the sets that can match the first code point of a match.
void FirstSets(const Node& node, std::vector<int>* sets) {
  switch (node.kind) {
    case Node::Kind::kSet:
      sets->push_back(node.set);
      return;
    case Node::Kind::kConcat:
      for (const auto& child : node.children) {
        FirstSets(*child, sets);
        if (!Nullable(*child)) return;
      }
      return;
    case Node::Kind::kAlternate:
    case Node::Kind::kRepeat:
      for (const auto& child : node.children) FirstSets(*child, sets);
      return;
    default:
      return;
  }
}

class Compiler {
 public:
  absl::Status Emit(const Node& node, std::vector<Inst>* out) {
    switch (node.kind) {
      case Node::Kind::kEmpty:
        return absl::OkStatus();
      case Node::Kind::kSet:
        out->push_back({Op::kSet, Greed::kGreedy, false, node.set});
        return absl::OkStatus();
      case Node::Kind::kConcat:
        for (const auto& child : node.children) {
          if (auto status = Emit(*child, out); !status.ok()) return status;
        }
        return absl::OkStatus();
      case Node::Kind::kAlternate:
        return EmitAlternation(node, 0, out);
      case Node::Kind::kRepeat:
        return EmitRepeat(node, out);
      case Node::Kind::kLookahead: {
        const size_t look = out->size();
        out->push_back({Op::kLook, Greed::kGreedy, node.negated});
        pending_.push_back({look, node.children[0].get()});
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // Lookahead bodies are compiled after the main program, each ending in kMatch.
  absl::Status EmitPending(std::vector<Inst>* out) {
    while (!pending_.empty()) {
      auto [look, body] = pending_.back();
      pending_.pop_back();
      (*out)[look].x = static_cast<int32_t>(out->size());
      if (auto status = Emit(*body, out); !status.ok()) return status;
      out->push_back({Op::kMatch});
    }
    return absl::OkStatus();
  }

 private:
  absl::Status EmitAlternation(const Node& node, size_t index, std::vector<Inst>* out) {
    if (index + 1 == node.children.size()) return Emit(*node.children[index], out);
    const size_t split = out->size();
    out->push_back({Op::kSplit});
    (*out)[split].x = static_cast<int32_t>(out->size());
    if (auto status = Emit(*node.children[index], out); !status.ok()) return status;
    const size_t jump = out->size();
    out->push_back({Op::kJump});
    (*out)[split].y = static_cast<int32_t>(out->size());
    if (auto status = EmitAlternation(node, index + 1, out); !status.ok()) return status;
    (*out)[jump].x = static_cast<int32_t>(out->size());
    return absl::OkStatus();
  }

  absl::Status EmitRepeat(const Node& node, std::vector<Inst>* out) {
    const Node& body = *node.children[0];
    if (body.kind == Node::Kind::kSet) {
      out->push_back({Op::kRepeat, node.greed, false, body.set, 0, node.min, node.max});
      return absl::OkStatus();
    }
    if (node.greed == Greed::kPossessive) {
      return absl::InvalidArgumentError("regex: possessive quantifier on a group is not supported");
    }
    if (node.max == Regex::kUnbounded && Nullable(body)) {
      return absl::InvalidArgumentError(
          "regex: unbounded repetition of an expression that can match empty is not supported");
    }
    if (node.min > 1000 || (node.max != Regex::kUnbounded && node.max > 1000)) {
      return absl::InvalidArgumentError("regex: repetition count above 1000 is not supported");
    }
    for (uint32_t k = 0; k < node.min; ++k) {
      if (auto status = Emit(body, out); !status.ok()) return status;
    }
    const bool lazy = node.greed == Greed::kLazy;
    if (node.max == Regex::kUnbounded) {
      const size_t split = out->size();
      out->push_back({Op::kSplit});
      if (auto status = Emit(body, out); !status.ok()) return status;
      out->push_back({Op::kJump, Greed::kGreedy, false, static_cast<int32_t>(split)});
      SetSplit(&(*out)[split], split + 1, out->size(), lazy);
      return absl::OkStatus();
    }
    std::vector<size_t> splits;
    for (uint32_t k = node.min; k < node.max; ++k) {
      splits.push_back(out->size());
      out->push_back({Op::kSplit});
      if (auto status = Emit(body, out); !status.ok()) return status;
    }
    for (const size_t split : splits) SetSplit(&(*out)[split], split + 1, out->size(), lazy);
    return absl::OkStatus();
  }

  static void SetSplit(Inst* split, size_t body, size_t exit, bool lazy) {
    split->x = static_cast<int32_t>(lazy ? exit : body);
    split->y = static_cast<int32_t>(lazy ? body : exit);
  }

  std::vector<std::pair<size_t, const Node*>> pending_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  if (!IsValidUtf8(pattern)) return absl::InvalidArgumentError("regex: pattern is not UTF-8");
  std::vector<CharSet> sets;
  auto root = ParseRegex(pattern, &sets);
  if (!root.ok()) return root.status();
  std::vector<Inst> program;
  Compiler compiler;
  if (auto status = compiler.Emit(**root, &program); !status.ok()) return status;
  program.push_back({Op::kMatch});
  if (auto status = compiler.EmitPending(&program); !status.ok()) return status;

  std::vector<CharSetItem> first_items;
  if (Nullable(**root)) {
    first_items.push_back({CharSetItem::Kind::kRange, 0, kMaxCodePoint});
  } else {
    std::vector<int> first_sets;
    FirstSets(**root, &first_sets);
    // The union is exact for the BMP bitmap; beyond it CharSet falls back to trying a match.
    for (char32_t c = 0; c < 0x10000; ++c) {
      for (const int s : first_sets) {
        if (sets[s].Contains(c)) {
          if (!first_items.empty() && first_items.back().last + 1 == c) {
            first_items.back().last = c;
          } else {
            first_items.push_back({CharSetItem::Kind::kRange, c, c});
          }
          break;
        }
      }
    }
    first_items.push_back({CharSetItem::Kind::kRange, 0x10000, kMaxCodePoint});
  }
  CharSet first(std::move(first_items), false, false);
  return std::make_unique<Regex>(std::move(program), std::move(sets), std::move(first));
}

}  // namespace mlaserve::tokenizer_internal
