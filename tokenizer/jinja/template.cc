#include "tokenizer/jinja/template.h"

#include <cmath>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace ridge::jinja {

struct Template::Program {
  Body body;
};

namespace {

using Frame = std::unordered_map<std::string, Value>;

enum class Flow { kNormal, kBreak, kContinue };

absl::Status At(int line, int column, const absl::Status& status) {
  if (status.ok() || status.code() == absl::StatusCode::kAborted ||
      status.message().substr(0, 5) == "line ") {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat("line ", line, ", column ", column, ": ",
                                                  std::string(status.message())));
}

absl::Status Fail(const Expr& e, const std::string& message) {
  return At(e.line, e.column, absl::InvalidArgumentError(message));
}

std::string UndefinedMessage(const Value& v) {
  return absl::StrCat("'", v.undefined_name(), "' is undefined");
}

class Evaluator {
 public:
  Evaluator(const Value& context, const RenderLimits& limits) : limits_(limits) {
    frames_.push_back(std::make_shared<Frame>());
    if (context.is_object()) {
      for (const auto& [k, v] : context.as_object().entries) (*frames_[0])[k] = v;
    }
  }

  absl::StatusOr<std::string> Run(const Body& body) {
    std::string out;
    absl::StatusOr<Flow> flow = Exec(body, &out);
    if (!flow.ok()) return flow.status();
    return out;
  }

 private:
  absl::Status Append(std::string* out, const std::string& text) {
    written_ += text.size();
    if (written_ > limits_.max_output_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the rendered template exceeds ", limits_.max_output_bytes, " bytes"));
    }
    out->append(text);
    return absl::OkStatus();
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = (*it)->find(name);
      if (found != (*it)->end()) return found->second;
    }
    if (IsKnownGlobal(name)) return GlobalFunction(name);
    return Value::MakeUndefined(name);
  }

  void Assign(const std::string& name, Value value) { (*frames_.back())[name] = std::move(value); }

  absl::StatusOr<Flow> Exec(const Body& body, std::string* out) {
    for (const auto& stmt : body) {
      absl::StatusOr<Flow> flow = ExecOne(*stmt, out);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecOne(const Stmt& s, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Stmt& s, std::string* out);
  absl::Status ExecSet(const Stmt& s);
  absl::StatusOr<Value> CallMacro(const Stmt& macro, CallArgs& args, const Value& caller);
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::Status EvalArgs(const Expr& e, size_t first, CallArgs* args);

  const RenderLimits& limits_;
  std::vector<std::shared_ptr<Frame>> frames_;
  size_t written_ = 0;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

absl::StatusOr<Flow> Evaluator::ExecOne(const Stmt& s, std::string* out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      if (absl::Status st = Append(out, s.text); !st.ok()) return st;
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      absl::StatusOr<Value> v = Eval(*s.expr);
      if (!v.ok()) return v.status();
      if (absl::Status st = Append(out, v->Str()); !st.ok()) return st;
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (condition != nullptr) {
          absl::StatusOr<Value> v = Eval(*condition);
          if (!v.ok()) return v.status();
          if (!v->Truthy()) continue;
        }
        return Exec(body, out);
      }
      return Flow::kNormal;
    case Stmt::Kind::kFor:
      return ExecFor(s, out);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      if (absl::Status st = ExecSet(s); !st.ok()) return st;
      return Flow::kNormal;
    case Stmt::Kind::kMacro: {
      const Stmt* macro = &s;
      Assign(s.name, Value(std::make_shared<const Callable>(
                         Callable{s.name, [this, macro](CallArgs& args) {
                                    return CallMacro(*macro, args, Value::MakeUndefined("caller"));
                                  }})));
      return Flow::kNormal;
    }
    case Stmt::Kind::kCallBlock: {
      const Stmt* block = &s;
      // caller() renders the block's body with the call block's parameters.
      Value caller(std::make_shared<const Callable>(Callable{
          "caller", [this, block](CallArgs& args) -> absl::StatusOr<Value> {
            frames_.push_back(std::make_shared<Frame>());
            for (size_t i = 0; i < block->params.size(); ++i) {
              Assign(block->params[i].first, i < args.positional.size()
                                                 ? args.positional[i]
                                                 : Value::MakeUndefined(block->params[i].first));
            }
            std::string text;
            absl::StatusOr<Flow> flow = Exec(block->body, &text);
            frames_.pop_back();
            if (!flow.ok()) return flow.status();
            return Value(std::move(text));
          }}));
      const Expr& call = *s.expr;
      absl::StatusOr<Value> callee = Eval(*call.items[0]);
      if (!callee.ok()) return callee.status();
      CallArgs args;
      if (absl::Status st = EvalArgs(call, 1, &args); !st.ok()) return st;
      if (!callee->is_callable()) return Fail(call, "'{% call %}' needs a macro");
      args.keyword.emplace_back("caller", caller);
      absl::StatusOr<Value> v = callee->as_callable().call(args);
      if (!v.ok()) return At(s.line, s.column, v.status());
      if (absl::Status st = Append(out, v->Str()); !st.ok()) return st;
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      std::string text;
      absl::StatusOr<Flow> flow = Exec(s.body, &text);
      if (!flow.ok()) return flow;
      frames_.push_back(std::make_shared<Frame>());
      Assign(kFilterBlockInput, Value(std::move(text)));
      absl::StatusOr<Value> v = Eval(*s.expr);
      frames_.pop_back();
      if (!v.ok()) return v.status();
      if (absl::Status st = Append(out, v->Str()); !st.ok()) return st;
      return Flow::kNormal;
    }
    case Stmt::Kind::kGeneration:
      return Exec(s.body, out);
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Evaluator::ExecFor(const Stmt& s, std::string* out) {
  absl::StatusOr<Value> iterable = Eval(*s.expr);
  if (!iterable.ok()) return iterable.status();
  absl::StatusOr<Array> all = Iterate(*iterable);
  if (!all.ok()) return At(s.expr->line, s.expr->column, all.status());
  auto bind = [&](const Value& item) -> absl::Status {
    if (s.targets.size() == 1) {
      Assign(s.targets[0], item);
      return absl::OkStatus();
    }
    absl::StatusOr<Array> parts = Iterate(item);
    if (!parts.ok() || parts->size() != s.targets.size()) {
      return At(s.line, s.column,
                absl::InvalidArgumentError(absl::StrCat("cannot unpack ", item.Repr().substr(0, 40),
                                                        " into ", s.targets.size(), " names")));
    }
    for (size_t i = 0; i < s.targets.size(); ++i) Assign(s.targets[i], (*parts)[i]);
    return absl::OkStatus();
  };
  Array items;
  if (s.condition != nullptr) {  // "for x in y if c": filtered before the loop counts
    for (const Value& item : *all) {
      frames_.push_back(std::make_shared<Frame>());
      absl::Status bound = bind(item);
      absl::StatusOr<Value> keep = bound.ok() ? Eval(*s.condition) : absl::StatusOr<Value>(bound);
      frames_.pop_back();
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) items.push_back(item);
    }
  } else {
    items = *std::move(all);
  }
  if (items.empty()) return Exec(s.else_body, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      return At(
          s.line, s.column,
          absl::InvalidArgumentError(absl::StrCat(
              "the template ran more than ", limits_.max_loop_iterations, " loop iterations")));
    }
    frames_.push_back(std::make_shared<Frame>());
    if (absl::Status st = bind(items[static_cast<size_t>(i)]); !st.ok()) return st;
    auto loop = std::make_shared<Object>();
    loop->Set("index", Value(i + 1));
    loop->Set("index0", Value(i));
    loop->Set("revindex", Value(n - i));
    loop->Set("revindex0", Value(n - i - 1));
    loop->Set("first", Value(i == 0));
    loop->Set("last", Value(i == n - 1));
    loop->Set("length", Value(n));
    loop->Set("depth", Value(1));
    loop->Set("depth0", Value(0));
    loop->Set("previtem",
              i > 0 ? items[static_cast<size_t>(i - 1)] : Value::MakeUndefined("previtem"));
    loop->Set("nextitem",
              i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::MakeUndefined("nextitem"));
    loop->Set("cycle",
              Value(std::make_shared<const Callable>(Callable{
                  "cycle", [i](CallArgs& args) -> absl::StatusOr<Value> {
                    if (args.positional.empty()) {
                      return absl::InvalidArgumentError("loop.cycle() needs arguments");
                    }
                    return args.positional[static_cast<size_t>(i) % args.positional.size()];
                  }})));
    Assign("loop", Value(std::move(loop)));
    absl::StatusOr<Flow> flow = Exec(s.body, out);
    frames_.pop_back();
    if (!flow.ok()) return flow;
    if (*flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

absl::Status Evaluator::ExecSet(const Stmt& s) {
  if (s.kind == Stmt::Kind::kSetBlock) {
    std::string text;
    absl::StatusOr<Flow> flow = Exec(s.body, &text);
    if (!flow.ok()) return flow.status();
    Assign(s.targets[0], Value(std::move(text)));
    return absl::OkStatus();
  }
  absl::StatusOr<Value> v = Eval(*s.expr);
  if (!v.ok()) return v.status();
  if (!s.attribute.empty()) {
    const Value target = Lookup(s.targets[0]);
    if (!target.is_object() || !target.as_object().is_namespace) {
      return At(s.line, s.column,
                absl::InvalidArgumentError(
                    absl::StrCat("cannot assign attribute '", s.attribute, "' on '", s.targets[0],
                                 "': only namespace() objects take attributes")));
    }
    target.mutable_object().Set(s.attribute, *std::move(v));
    return absl::OkStatus();
  }
  if (s.targets.size() == 1) {
    Assign(s.targets[0], *std::move(v));
    return absl::OkStatus();
  }
  absl::StatusOr<Array> parts = Iterate(*v);
  if (!parts.ok() || parts->size() != s.targets.size()) {
    return At(s.line, s.column,
              absl::InvalidArgumentError(
                  absl::StrCat("cannot unpack into ", s.targets.size(), " names")));
  }
  for (size_t i = 0; i < s.targets.size(); ++i) Assign(s.targets[i], (*parts)[i]);
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::CallMacro(const Stmt& macro, CallArgs& args, const Value& caller) {
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::InvalidArgumentError(absl::StrCat("macro '", macro.name, "' nested more than ",
                                                   limits_.max_call_depth, " calls deep"));
  }
  if (++iterations_ > limits_.max_loop_iterations) {
    return absl::InvalidArgumentError("the template made too many macro calls");
  }
  // A macro sees the template's top-level variables and its own parameters.
  std::vector<std::shared_ptr<Frame>> saved;
  saved.swap(frames_);
  frames_.push_back(saved[0]);
  frames_.push_back(std::make_shared<Frame>());
  ++call_depth_;
  absl::Status status;
  Array varargs;
  auto kwargs = std::make_shared<Object>();
  Value caller_value = caller;
  for (auto& [k, v] : args.keyword) {
    if (k == "caller") caller_value = v;
  }
  for (size_t i = 0; i < macro.params.size() && status.ok(); ++i) {
    const auto& [name, fallback] = macro.params[i];
    const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
    for (const auto& [k, v] : args.keyword) {
      if (k == name) given = &v;
    }
    if (given != nullptr) {
      Assign(name, *given);
    } else if (fallback != nullptr) {
      absl::StatusOr<Value> v = Eval(*fallback);
      if (!v.ok())
        status = v.status();
      else
        Assign(name, *std::move(v));
    } else {
      Assign(name, Value::MakeUndefined(name));
    }
  }
  for (size_t i = macro.params.size(); i < args.positional.size(); ++i)
    varargs.push_back(args.positional[i]);
  for (auto& [k, v] : args.keyword) {
    bool is_param = k == "caller";
    for (const auto& p : macro.params) is_param = is_param || p.first == k;
    if (!is_param) kwargs->Set(k, v);
  }
  Assign("varargs", Value(std::move(varargs)));
  Assign("kwargs", Value(std::move(kwargs)));
  Assign("caller", caller_value);
  std::string text;
  if (status.ok()) {
    absl::StatusOr<Flow> flow = Exec(macro.body, &text);
    if (!flow.ok()) status = flow.status();
  }
  --call_depth_;
  frames_.swap(saved);
  if (!status.ok()) return status;
  return Value(std::move(text));
}

absl::Status Evaluator::EvalArgs(const Expr& e, size_t first, CallArgs* args) {
  for (size_t i = first; i < e.items.size(); ++i) {
    absl::StatusOr<Value> v = Eval(*e.items[i]);
    if (!v.ok()) return v.status();
    args->positional.push_back(*std::move(v));
  }
  for (const auto& [name, expr] : e.keywords) {
    absl::StatusOr<Value> v = Eval(*expr);
    if (!v.ok()) return v.status();
    args->keyword.emplace_back(name, *std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Array items;
      for (const auto& item : e.items) {
        absl::StatusOr<Value> v = Eval(*item);
        if (!v.ok()) return v;
        items.push_back(*std::move(v));
      }
      return Value(std::move(items));
    }
    case Expr::Kind::kDict: {
      auto o = std::make_shared<Object>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        absl::StatusOr<Value> k = Eval(*e.items[i]);
        if (!k.ok()) return k;
        if (!k->is_string()) return Fail(*e.items[i], "dict keys must be strings");
        absl::StatusOr<Value> v = Eval(*e.items[i + 1]);
        if (!v.ok()) return v;
        o->Set(k->as_string(), *std::move(v));
      }
      return Value(std::move(o));
    }
    case Expr::Kind::kAttribute: {
      absl::StatusOr<Value> object = Eval(*e.items[0]);
      if (!object.ok()) return object;
      if (object->is_undefined()) {
        return Fail(e, absl::StrCat(UndefinedMessage(*object), " (reading '.", e.name, "')"));
      }
      return GetAttribute(*object, e.name);
    }
    case Expr::Kind::kSubscript: {
      absl::StatusOr<Value> object = Eval(*e.items[0]);
      if (!object.ok()) return object;
      absl::StatusOr<Value> key = Eval(*e.items[1]);
      if (!key.ok()) return key;
      if (object->is_undefined()) {
        return Fail(e, absl::StrCat(UndefinedMessage(*object), " (reading [", key->Repr(), "])"));
      }
      absl::StatusOr<Value> v = GetItem(*object, *key);
      if (!v.ok()) return At(e.line, e.column, v.status());
      return v;
    }
    case Expr::Kind::kSlice: {
      Value parts[4];
      for (size_t i = 0; i < 4; ++i) {
        if (e.items[i] == nullptr) {
          parts[i] = Value::None();
          continue;
        }
        absl::StatusOr<Value> v = Eval(*e.items[i]);
        if (!v.ok()) return v;
        parts[i] = *std::move(v);
      }
      if (parts[0].is_undefined()) return Fail(e, UndefinedMessage(parts[0]));
      absl::StatusOr<Value> v = Slice(parts[0], parts[1], parts[2], parts[3]);
      if (!v.ok()) return At(e.line, e.column, v.status());
      return v;
    }
    case Expr::Kind::kCall: {
      absl::StatusOr<Value> callee = Eval(*e.items[0]);
      if (!callee.ok()) return callee;
      if (callee->is_undefined()) {
        return Fail(e, absl::StrCat(UndefinedMessage(*callee), " and cannot be called"));
      }
      if (!callee->is_callable()) {
        return Fail(e, absl::StrCat("a ", callee->TypeName(), " cannot be called"));
      }
      CallArgs args;
      if (absl::Status st = EvalArgs(e, 1, &args); !st.ok()) return st;
      absl::StatusOr<Value> v = callee->as_callable().call(args);
      if (!v.ok()) return At(e.line, e.column, v.status());
      return v;
    }
    case Expr::Kind::kFilter: {
      absl::StatusOr<Value> subject = Eval(*e.items[0]);
      if (!subject.ok()) return subject;
      CallArgs args;
      if (absl::Status st = EvalArgs(e, 1, &args); !st.ok()) return st;
      if (subject->is_undefined() && e.name != "default" && e.name != "d" && e.name != "length" &&
          e.name != "count" && e.name != "string" && e.name != "list" && e.name != "items" &&
          e.name != "join" && e.name != "trim" && e.name != "lower" && e.name != "upper" &&
          e.name != "safe" && e.name != "first" && e.name != "last") {
        return Fail(e, absl::StrCat(UndefinedMessage(*subject), " (filter '", e.name, "')"));
      }
      absl::StatusOr<Value> v = ApplyFilter(e.name, *subject, args);
      if (!v.ok()) return At(e.line, e.column, v.status());
      return v;
    }
    case Expr::Kind::kTest: {
      absl::StatusOr<Value> subject = Eval(*e.items[0]);
      if (!subject.ok()) return subject;
      CallArgs args;
      if (absl::Status st = EvalArgs(e, 1, &args); !st.ok()) return st;
      absl::StatusOr<bool> r = ApplyTest(e.name, *subject, args);
      if (!r.ok()) return At(e.line, e.column, r.status());
      return Value(*r != e.negated);
    }
    case Expr::Kind::kUnary: {
      absl::StatusOr<Value> v = Eval(*e.items[0]);
      if (!v.ok()) return v;
      if (e.name == "not") return Value(!v->Truthy());
      if (!v->is_number()) {
        return Fail(e,
                    absl::StrCat("bad operand type for unary ", e.name, ": '", v->TypeName(), "'"));
      }
      if (e.name == "+") return v->is_float() ? Value(v->as_double()) : Value(v->as_int());
      return v->is_float() ? Value(-v->as_double()) : Value(-v->as_int());
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      absl::StatusOr<Value> left = Eval(*e.items[0]);
      if (!left.ok()) return left;
      if (left->Truthy() == (e.kind == Expr::Kind::kOr)) return left;
      return Eval(*e.items[1]);
    }
    case Expr::Kind::kConditional: {
      absl::StatusOr<Value> condition = Eval(*e.items[1]);
      if (!condition.ok()) return condition;
      if (condition->Truthy()) return Eval(*e.items[0]);
      if (e.items[2] == nullptr) return Value::MakeUndefined("else");
      return Eval(*e.items[2]);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
  }
  return Fail(e, "unknown expression");
}

absl::StatusOr<Value> Evaluator::EvalBinary(const Expr& e) {
  absl::StatusOr<Value> left = Eval(*e.items[0]);
  if (!left.ok()) return left;
  absl::StatusOr<Value> right = Eval(*e.items[1]);
  if (!right.ok()) return right;
  absl::StatusOr<Value> v = ApplyOperator(e.name, *left, *right, limits_.max_output_bytes);
  if (!v.ok()) return At(e.line, e.column, v.status());
  return v;
}
}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<Body> body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  auto program = std::make_shared<Program>();
  program->body = *std::move(body);
  Template t;
  t.program_ = std::move(program);
  return t;
}

absl::StatusOr<std::string> Template::Render(const Value& context,
                                             const RenderLimits& limits) const {
  Evaluator evaluator(context, limits);
  absl::StatusOr<std::string> out = evaluator.Run(program_->body);
  if (!out.ok() && out.status().code() == absl::StatusCode::kAborted) {
    return absl::InvalidArgumentError(
        absl::StrCat("the template raised: ", std::string(out.status().message())));
  }
  return out;
}

}  // namespace ridge::jinja
