// The web page (src/server/web/*), embedded into the binary at build time by web_assets.cmake.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ernie::server {

struct WebAsset {
  const char* path;  // "/index.html"
  const char* mime;  // "text/html; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

const std::vector<WebAsset>& web_assets();                // generated
const WebAsset* find_web_asset(const std::string& path);  // "/" means "/index.html"; nullptr if none

}  // namespace ernie::server
