#include "core/json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ernie {

nlohmann::json read_json_file(const std::string& path) {
  using json = nlohmann::json;
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);  // follows links; a link loop is an error code, not a throw
  ERNIE_CHECK(!ec || ec == std::errc::no_such_file_or_directory, path, ": cannot open (", ec.message(), ")");
  ERNIE_CHECK(std::filesystem::exists(st), path, ": cannot open (no such file)");
  ERNIE_CHECK(std::filesystem::is_regular_file(st), path, ": is not a regular file",
              std::filesystem::is_directory(st) ? " (it is a folder)" : "");
  std::ifstream in(path, std::ios::binary);
  ERNIE_CHECK(in, path, ": cannot open (", std::strerror(errno), ")");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ERNIE_CHECK(!in.bad(), path, ": read error");
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    try {
      json unused = json::parse(text);
      (void)unused;
    } catch (const json::parse_error& e) {
      fail(path, ": invalid JSON (", e.what(), ")");
    }
    fail(path, ": invalid JSON");
  }
  ERNIE_CHECK(j.is_object(), path, ": expected a JSON object at the top level");
  return j;
}

}  // namespace ernie
