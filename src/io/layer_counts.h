// A config's layer count bounded by what its checkpoint can hold (every layer has tensors), checked before the
// expected-tensor lists are built from it: a config cannot make us build billions of names. Used where a folder,
// a converted file or a component file is opened (model_folder.cpp, model_folder_files.cpp).
#pragma once
#include <cstdint>

#include "io/model_folder.h"

namespace ernie {

void check_layer_count(const Component& c, int64_t layers, const char* field);

}  // namespace ernie
