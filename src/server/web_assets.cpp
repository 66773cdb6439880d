#include "server/web_assets.h"

namespace ernie::server {

const WebAsset* find_web_asset(const std::string& path) {
  const std::string want = path == "/" ? "/index.html" : path;
  for (const WebAsset& a : web_assets())
    if (want == a.path) return &a;
  return nullptr;
}

}  // namespace ernie::server
