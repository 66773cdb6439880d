// Reading JSON files (configs, tokenizers, model indexes) with errors that name the file.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ernie {

// The JSON object in the file at `path`. Throws Error naming the path when it is missing, not a regular file,
// unreadable, not JSON, or not an object at the top level.
nlohmann::json read_json_file(const std::string& path);

}  // namespace ernie
