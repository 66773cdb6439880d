// A float as people write it: the shortest decimal that reads back as the same float (4 -> "4", 0.6f -> "0.6").
#pragma once
#include <string>

namespace ernie {

std::string shortest_decimal(float v);

}  // namespace ernie
