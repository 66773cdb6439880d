// The prompt enhancer's input, exactly as the reference builds it (diffusers
// ErnieImagePipeline._enhance_prompt_with_pe): the user content is
// json.dumps({"prompt": p, "width": W, "height": H}, ensure_ascii=False) and the messages are
// [{"role": "system", ...} when a system prompt is given, {"role": "user", "content": that JSON}].
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ernie {

// Throws Error when the prompt is not valid UTF-8 (a Python str always is) or a size is not positive.
std::string pe_user_content(const std::string& prompt, int width, int height);
nlohmann::ordered_json pe_messages(const std::string& prompt, int width, int height,
                                   const std::optional<std::string>& system_prompt = std::nullopt);

}  // namespace ernie
