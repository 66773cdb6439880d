// Reading JSON files (configs, tokenizers, model indexes) with errors that name the file.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ernie {

// The largest JSON file read (the released tokenizer.json is 17 MB).
inline constexpr size_t kMaxJsonFileBytes = size_t(256) << 20;

// The JSON object in the file at `path`. Throws Error naming the path when it is missing, not a regular file
// (core/file.h), larger than kMaxJsonFileBytes, unreadable, not JSON, or not an object at the top level.
nlohmann::json read_json_file(const std::string& path);

}  // namespace ernie
