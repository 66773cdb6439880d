// ernie-image tokenize --model DIR|TE.gguf [--component tokenizer|pe_tokenizer] --text TEXT [--no-special]
// ernie-image tokenize --model DIR --decode [--text "[1, 2, 3]" | < ids.json] [--skip-special]
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/file.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"
#include "text/tokenizer.h"

namespace ernie::cli {
namespace {
struct Opts {
  std::string model, component = "tokenizer", text;
  bool text_given = false, decode = false, skip_special = false, no_special = false, no_truncation = false;
};

std::vector<int64_t> parse_ids(const std::string& s) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    fail("--decode: ids must be a JSON array of integers: ", e.what());
  }
  ERNIE_CHECK(j.is_array(), "--decode: ids must be a JSON array of integers");
  std::vector<int64_t> ids;
  for (const auto& v : j) {
    ERNIE_CHECK(v.is_number_integer(), "--decode: ids must be a JSON array of integers, found ", v.dump());
    ids.push_back(v.get<int64_t>());
  }
  return ids;
}

Register reg(40, [](CLI::App& app) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("tokenize", "Tokenize text to ids (JSON array), or decode ids to text");
  c->add_option("--model,-m", o->model, "model folder (diffusers layout), a folder with tokenizer.json, or a text encoder GGUF (its tokenizer.ggml.*)")->required();
  c->add_option("--component", o->component, "which tokenizer: tokenizer or pe_tokenizer")
      ->check(CLI::IsMember({"tokenizer", "pe_tokenizer"}));
  c->add_option("--text,-t", o->text, "text to tokenize; with --decode, the ids (else read from stdin)");
  c->add_flag("--decode", o->decode, "decode ids to text");
  c->add_flag("--skip-special", o->skip_special, "with --decode: leave special tokens out");
  c->add_flag("--no-special", o->no_special, "do not add the post-processor's special tokens (BOS)");
  c->add_flag("--no-truncation", o->no_truncation, "do not cut at model_max_length");
  return std::function<int()>([o, c] {
    namespace fs = std::filesystem;
    Tokenizer tok = [&] {
      if (fs::is_regular_file(o->model)) {  // a llama.cpp GGUF's own tokenizer (tokenizer.ggml.*)
        ERNIE_CHECK(read_file_head(o->model, 4) == "GGUF", o->model, ": not a GGUF file; --model takes a model folder, ",
                    "a folder with tokenizer.json, or a text encoder GGUF carrying tokenizer.ggml.*");
        ERNIE_CHECK(c->count("--component") == 0, "--component: a GGUF carries one tokenizer; leave it out");
        return tokenizer_from_gguf(*GgufFile::open(o->model));
      }
      std::string dir = o->model;
      if (!fs::exists(fs::path(dir) / "tokenizer.json")) dir = (fs::path(o->model) / o->component).string();
      return Tokenizer::load(dir);
    }();
    std::string input = o->text;
    if (c->count("--text") == 0) input.assign(std::istreambuf_iterator<char>(std::cin), {});
    if (o->decode) {
      const std::vector<int64_t> ids = parse_ids(input);
      for (int64_t id : ids)  // an id outside the vocabulary has no text: an error, not an empty line
        ERNIE_CHECK(id >= 0 && uint64_t(id) < tok.vocab_size(), "--decode: id ", std::to_string(id),
                    " is not in the vocabulary (ids 0 to ", std::to_string(tok.vocab_size() - 1), ")");
      std::string text = tok.decode(ids, o->skip_special);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
      return 0;
    }
    auto ids = tok.encode(input, !o->no_special, !o->no_truncation);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return 0;
  });
});
}  // namespace
}  // namespace ernie::cli
