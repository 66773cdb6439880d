// A model's tokenizers, read through ModelFolder::read_file so a model folder and a converted single file
// (`ernie-image convert`) give the same tokenizer.
#pragma once
#include <string>

#include "io/model_folder.h"
#include "text/tokenizer.h"

namespace ernie {

// The tokenizer in `rel` ("tokenizer", "pe_tokenizer"): rel/tokenizer.json and, when present,
// rel/tokenizer_config.json. Errors name the model path and the file.
Tokenizer load_model_tokenizer(const ModelFolder& m, const std::string& rel);

}  // namespace ernie
