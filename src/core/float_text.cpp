#include "core/float_text.h"

#include <cstdio>
#include <cstdlib>

namespace ernie {

std::string shortest_decimal(float v) {
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {  // 9 significant digits always read back
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace ernie
