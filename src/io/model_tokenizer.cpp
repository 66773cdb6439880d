#include "io/model_tokenizer.h"

#include "core/error.h"

namespace ernie {

Tokenizer load_model_tokenizer(const ModelFolder& m, const std::string& rel) {
  const std::string tj = rel + "/tokenizer.json", tc = rel + "/tokenizer_config.json";
  ERNIE_CHECK(m.has_file(tj), m.root, ": ", tj, " not found (a tokenizer folder needs tokenizer.json)");
  std::string config = m.has_file(tc) ? m.read_file(tc) : std::string();
  if (config.find_first_not_of(" \t\r\n") == std::string::npos) config.clear();
  return Tokenizer::from_json(m.read_file(tj), config, m.root + "/" + tj);
}

}  // namespace ernie
