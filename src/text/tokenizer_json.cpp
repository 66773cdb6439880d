#include "text/tokenizer_json.h"

#include <algorithm>

#include "core/error.h"

namespace ernie::text {
namespace {

using json = nlohmann::json;

class Sax : public nlohmann::json_sax<json> {
 public:
  Sax(TokenizerJson& out, const std::string& where) : out_(out), where_(where) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) fail(where_, ": model.vocab id of \"", key_, "\" is negative");
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab) {
      if (v > uint64_t(INT32_MAX)) fail(where_, ": model.vocab id of \"", key_, "\" is too large");
      out_.vocab.insert_or_assign(key_, int64_t(v));  // a repeated key keeps the last id
      key_.clear();
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == Mode::Vocab) fail(where_, ": model.vocab id of \"", key_, "\" is not an integer");
    return value(json(v));
  }
  bool string(string_t& s) override {
    if (mode_ == Mode::Merges) {
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail(where_, ": model.merges entry ", std::to_string(out_.merges.size()), " \"", s,
             "\" is not two tokens separated by one space");
      out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      return true;
    }
    if (mode_ == Mode::MergePair) {
      ERNIE_CHECK(pair_n_ < 2, where_, ": model.merges entry ", std::to_string(out_.merges.size()),
                  " has more than two tokens");
      pair_[pair_n_++] = std::move(s);
      return true;
    }
    if (mode_ == Mode::Vocab) fail(where_, ": model.vocab id of \"", key_, "\" is not an integer");
    return value(json(std::move(s)));
  }
  bool binary(binary_t&) override { fail(where_, ": unexpected binary value"); }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::Dom) fail(where_, ": ", mode_name(), " holds an unexpected object");
    if (pending_ == Pending::Vocab) {
      pending_ = Pending::None;
      mode_ = Mode::Vocab;
      out_.has_vocab = true;
      return true;
    }
    if (pending_ == Pending::Merges) fail(where_, ": model.merges must be a list");
    json* o = open(json::object());
    if (stack_.size() == 1 && last_key_ == "model") model_ = o;
    stack_.push_back(o);
    return true;
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::Vocab) {
      key_ = std::move(k);
      return true;
    }
    if (!stack_.empty() && stack_.back() == model_ && model_ && (k == "vocab" || k == "merges")) {
      pending_ = k == "vocab" ? Pending::Vocab : Pending::Merges;
      last_key_.clear();
      return true;
    }
    pending_ = Pending::None;
    last_key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::Dom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_n_ = 0;
      return true;
    }
    if (mode_ != Mode::Dom) fail(where_, ": ", mode_name(), " holds an unexpected list");
    if (pending_ == Pending::Merges) {
      pending_ = Pending::None;
      mode_ = Mode::Merges;
      out_.has_merges = true;
      return true;
    }
    if (pending_ == Pending::Vocab) fail(where_, ": model.vocab must be an object of token: id");
    stack_.push_back(open(json::array()));
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      ERNIE_CHECK(pair_n_ == 2, where_, ": model.merges entry ", std::to_string(out_.merges.size()),
                  " is not a pair of tokens");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    fail(where_, ": not valid JSON at byte ", std::to_string(pos), ": ", ex.what());
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };
  enum class Pending { None, Vocab, Merges };

  const char* mode_name() const {
    return mode_ == Mode::Vocab ? "model.vocab" : "model.merges";
  }
  // Places a scalar in the tree.
  bool value(json v) {
    if (mode_ != Mode::Dom) fail(where_, ": ", mode_name(), " holds an unexpected value");
    if (pending_ != Pending::None)
      fail(where_, pending_ == Pending::Vocab ? ": model.vocab must be an object of token: id"
                                              : ": model.merges must be a list");
    open(std::move(v));
    return true;
  }
  // Inserts a value under the current container and returns its address.
  json* open(json v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[last_key_];
    slot = std::move(v);
    return &slot;
  }

  TokenizerJson& out_;
  const std::string& where_;
  std::vector<json*> stack_;
  json* model_ = nullptr;
  Mode mode_ = Mode::Dom;
  Pending pending_ = Pending::None;
  std::string key_, last_key_;
  std::string pair_[2];
  int pair_n_ = 0;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& where) {
  TokenizerJson out;
  out.vocab.reserve(std::min<size_t>(size_t(1) << 17, text.size() / 16));
  Sax sax(out, where);
  json::sax_parse(text.begin(), text.end(), &sax);
  ERNIE_CHECK(out.doc.is_object(), where, ": the top level must be a JSON object");
  return out;
}

}  // namespace ernie::text
