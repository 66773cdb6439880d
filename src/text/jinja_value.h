// Template values with Python's semantics: what the renderer computes on (internal to src/text/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja_ast.h"

namespace ernie::jinja {

using ojson = nlohmann::ordered_json;

// A template value: a JSON value, Jinja's Undefined, or a namespace() object (a mutable dict).
struct Value {
  enum Kind : uint8_t { Json, Undefined, Namespace };
  ojson v;
  Kind k = Json;
  static Value undefined() { return {ojson(), Undefined}; }
  bool undef() const { return k == Undefined; }
};
inline Value J(ojson v) { return {std::move(v), Value::Json}; }

std::string type_name(const Value& x);
bool is_num(const Value& x);
bool is_int(const Value& x);
bool is_str(const Value& x);
bool is_list(const Value& x);
bool is_dict(const Value& x);
int64_t as_int(const ojson& v);
double as_double(const ojson& v);
const std::string& as_str(const Value& x);
bool truthy(const Value& x);
std::string to_str(const Value& x);
bool py_eq(const ojson& a, const ojson& b);
bool eq(const Value& a, const Value& b);
// Python's ordering: numbers with numbers, strings by code point (UTF-8 byte order), lists element-wise.
int py_cmp(const ojson& a, const ojson& b, Pos p, const std::string& op);
int64_t py_floordiv(int64_t a, int64_t b);
// Python's slice indices for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, Pos p);
std::string ascii_case(std::string s, bool upper);
// About the bytes `v` holds (32 per element, plus its strings' lengths), counted until it passes `limit`.
// Values nesting deeper than `depth` levels are an error: printing, comparing and copying them all recurse.
size_t footprint(const ojson& v, int depth, size_t limit, Pos p);

}  // namespace ernie::jinja
