#include "models/prompt_enhancer.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "io/configs.h"
#include "io/model_tokenizer.h"
#include "ops/ops.h"
#include "text/pe_prompt.h"
#include "text/py_str.h"

namespace ernie {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A cache with room for `capacity` tokens holding the rows of `old`.
KVCache grow_cache(const MistralModel& lm, const KVCache& old, int64_t capacity) {
  KVCache c = lm.new_cache(capacity);
  for (size_t i = 0; i < old.k.size(); ++i) {
    for (const auto& [dst, src] : {std::pair{&c.k[i], &old.k[i]}, std::pair{&c.v[i], &old.v[i]}}) {
      const size_t bytes = size_t(old.length) * size_t(src->nbytes() / size_t(src->dim(1)));
      if (bytes == 0) continue;
      if (dst->device().is_cpu()) std::memcpy(dst->raw(), src->raw(), bytes);
      else device_memory_ops().copy(dst->raw(), dst->device(), src->raw(), src->device(), bytes);
    }
  }
  c.length = old.length;
  return c;
}

void check_cancel(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load()) throw Cancelled();
}

}  // namespace

// Grows the cache (doubling, up to `limit` positions) when it has no room for one more token.
void room_for_one(const MistralModel& lm, KVCache& cache, int64_t limit) {
  if (cache.length + 1 > cache.capacity()) cache = grow_cache(lm, cache, std::min<int64_t>(limit, 2 * cache.capacity()));
}

// Appends the new token `id` to g (on_token told); whether generation goes on: not at EOS, not at
// max_new_tokens, and not cancelled (which throws).
bool take(int64_t id, const GenerateOptions& opt, Generation& g) {
  g.ids.push_back(id);
  if (opt.on_token) opt.on_token(int(g.ids.size()));
  if (id == opt.eos_id) {
    g.stopped_on_eos = true;
    return false;
  }
  if (int(g.ids.size()) >= opt.max_new_tokens) return false;
  check_cancel(opt.cancel);
  return true;
}

// Greedy decoding on a GPU, from the prompt's last hidden state: each step's token id stays on the device
// (argmax_indices) and feeds the next step's embedding, which is enqueued before the host reads the id back
// (through pinned memory and an event), so the GPU never waits for the host between tokens. The last step
// enqueued (after EOS or the last token wanted) is computed and dropped.
void greedy_on_device(const MistralModel& lm, KVCache& cache, const Tensor& last, int64_t limit,
                      const GenerateOptions& opt, Generation& g, Clock::time_point t0) {
  const int L = lm.num_layers();
  const Device dev = lm.device();
  Tensor pinned[2] = {ops::pinned_empty(sizeof(int64_t), dev), ops::pinned_empty(sizeof(int64_t), dev)};
  ops::StreamEvent ready[2] = {ops::StreamEvent(dev), ops::StreamEvent(dev)};
  // However this returns (EOS, an exception), no download may still be writing to `pinned` when it is freed.
  struct Drain {
    ops::StreamEvent* e;
    ~Drain() {
      try {
        e[0].synchronize(), e[1].synchronize();
      } catch (...) {  // a failed device already reported its error
      }
    }
  } drain{ready};
  // The id chosen from `h`'s logits: on the device, and on its way into pinned[slot].
  auto choose = [&](const Tensor& h, int slot) {
    Tensor id = ops::argmax_indices(lm.head_logits(h));
    ops::download_async(pinned[slot], id);
    ready[slot].record(ops::Stream::Compute);
    return id;
  };
  auto read = [&](int slot) {
    ready[slot].synchronize();
    int64_t id = 0;
    std::memcpy(&id, pinned[slot].raw(), sizeof(id));
    ERNIE_CHECK(id >= 0, "argmax: row 0 holds NaN: the model produced NaN logits");
    return id;
  };
  // The step after the token `id` (on the device) stands for: its id into pinned[slot].
  auto step = [&](const Tensor& id, int slot) {
    room_for_one(lm, cache, limit);
    return choose(lm.forward_from_device(id, L, &cache), slot);
  };
  Tensor id = choose(last, 0);
  int64_t next = read(0);
  g.prefill_s = seconds_since(t0);
  auto t1 = Clock::now();
  int slot = 0;  // pinned[slot] holds `next`
  Tensor ahead = opt.max_new_tokens > 1 ? step(id, 1) : Tensor();  // the step making the token after `next`
  while (take(next, opt, g)) {
    // Enqueue the step after `ahead` (when its token may still be wanted), then wait for ahead's id.
    Tensor after = int(g.ids.size()) + 1 < opt.max_new_tokens ? step(ahead, slot) : Tensor();
    slot ^= 1;
    next = read(slot);
    ahead = after;
  }
  g.decode_s = seconds_since(t1);
}

Generation generate_tokens(const MistralModel& lm, const std::vector<int64_t>& prompt_ids, Sampler& sampler,
                           const GenerateOptions& opt) {
  ERNIE_CHECK(!prompt_ids.empty(), "generate: empty prompt");
  ERNIE_CHECK(opt.max_new_tokens > 0, "generate: max_new_tokens must be positive, got ",
              std::to_string(opt.max_new_tokens));
  const int64_t P = int64_t(prompt_ids.size());
  const int64_t limit = P + opt.max_new_tokens;
  ERNIE_CHECK(limit <= lm.config().max_position_embeddings, "generate: ", std::to_string(P), " prompt tokens + ",
              std::to_string(opt.max_new_tokens), " new tokens exceed max_position_embeddings ",
              std::to_string(lm.config().max_position_embeddings));
  const int L = lm.num_layers();
  const int64_t vocab = lm.config().vocab_size;
  Generation g;

  check_cancel(opt.cancel);
  auto t0 = Clock::now();
  // The next token from the last position's hidden state [1, hidden]. Greedy: the argmax on the logits'
  // device, so only the id comes back (not the vocabulary-wide row).
  auto choose = [&](const Tensor& last) -> int64_t {
    const Tensor logits = lm.logits(last);
    ERNIE_CHECK(logits.numel() == vocab, "generate: logits row has ", std::to_string(logits.numel()),
                " entries, vocabulary is ", std::to_string(vocab));
    if (!sampler.params().do_sample()) return ops::argmax(logits)[0];
    std::vector<float> row = logits.to_vector();
    return sampler.next(row.data(), vocab);
  };
  KVCache cache = lm.new_cache(std::min<int64_t>(limit, P + 256));
  Tensor hidden = lm.forward(prompt_ids, L, &cache);
  if (!sampler.params().do_sample() && lm.device().is_cuda()) {
    greedy_on_device(lm, cache, ops::slice(hidden, 0, P - 1, 1), limit, opt, g, t0);
    return g;
  }
  int64_t next = choose(ops::slice(hidden, 0, P - 1, 1));
  g.prefill_s = seconds_since(t0);

  auto t1 = Clock::now();
  while (take(next, opt, g)) {
    room_for_one(lm, cache, limit);
    next = choose(lm.forward({next}, L, &cache));
  }
  g.decode_s = seconds_since(t1);
  return g;
}

// ---- PromptEnhancer -------------------------------------------------------------------------------------------

PromptEnhancer PromptEnhancer::load(const ModelFolder& m, Device device, DType act) {
  ERNIE_CHECK(m.pe && m.pe_c, m.root, ": no prompt enhancer (pe/ folder) in this model");
  ERNIE_CHECK(!m.pe_tokenizer_rel.empty(), m.root,
              ": the prompt enhancer has no tokenizer (pe_tokenizer/tokenizer.json or pe/tokenizer.json)");
  PromptEnhancer pe;
  const std::string rel = m.pe_tokenizer_rel;
  const std::string where = m.root + "/" + rel;
  std::string config_text = m.has_file(rel + "/tokenizer_config.json") ? m.read_file(rel + "/tokenizer_config.json") : "";
  pe.tok_ = load_model_tokenizer(m, rel);
  nlohmann::json cfg_plain;
  if (!config_text.empty()) {
    cfg_plain = nlohmann::json::parse(config_text, nullptr, false);
    ERNIE_CHECK(!cfg_plain.is_discarded() && cfg_plain.is_object(), where, "/tokenizer_config.json: not a JSON object");
    pe.tokenizer_config_ = nlohmann::ordered_json::parse(config_text);
  } else {
    pe.tokenizer_config_ = nlohmann::ordered_json::object();
  }
  std::optional<std::string> jinja;
  if (m.has_file(rel + "/chat_template.jinja")) jinja = m.read_file(rel + "/chat_template.jinja");
  pe.template_ = std::make_shared<ChatTemplate>(select_chat_template(jinja, cfg_plain, where));

  ERNIE_CHECK(pe.tok_.eos_id() >= 0, where, "/tokenizer_config.json: no eos_token (generation could never stop)");
  if (pe.tok_.model_max_length() > 0) pe.max_new_tokens_ = int(std::min<size_t>(pe.tok_.model_max_length(), 1 << 20));

  if (m.has_file("pe/generation_config.json")) {
    nlohmann::json gen = nlohmann::json::parse(m.read_file("pe/generation_config.json"), nullptr, false);
    ERNIE_CHECK(!gen.is_discarded() && gen.is_object(), m.root, "/pe/generation_config.json: not a JSON object");
    if (gen.contains("top_k") && !gen["top_k"].is_null()) {
      ERNIE_CHECK(gen["top_k"].is_number_integer() && gen["top_k"].get<int64_t>() >= 0, m.root,
                  "/pe/generation_config.json: top_k must be a non-negative integer");
      pe.defaults_.top_k = int(std::min<int64_t>(gen["top_k"].get<int64_t>(), 1 << 30));
    }
  }
  pe.lm_ = MistralModel::load(*m.pe_c, *m.pe, device, act, -1, /*with_lm_head=*/true);
  ERNIE_CHECK(int64_t(pe.tok_.vocab_size()) <= m.pe->vocab_size, where, "/tokenizer.json: ",
              std::to_string(pe.tok_.vocab_size()), " tokens but pe/config.json has vocab_size ",
              std::to_string(m.pe->vocab_size));
  return pe;
}

std::string PromptEnhancer::render(const std::string& prompt, int width, int height,
                                   const std::optional<std::string>& system_prompt) const {
  return template_->render(chat_template_context(pe_messages(prompt, width, height, system_prompt), tokenizer_config_));
}

std::vector<int64_t> PromptEnhancer::tokenize(const std::string& rendered) const {
  return tok_.encode(rendered, /*add_special_tokens=*/true, /*truncation=*/false);
}

EnhanceResult PromptEnhancer::enhance(const std::string& prompt, int width, int height, const EnhanceOptions& opt) const {
  EnhanceResult r;
  r.rendered = render(prompt, width, height, opt.system_prompt);
  r.prompt_ids = tokenize(r.rendered);
  Sampler sampler(opt.sampling.value_or(defaults_));
  GenerateOptions g;
  g.max_new_tokens = opt.max_new_tokens > 0 ? opt.max_new_tokens : max_new_tokens_;
  g.eos_id = tok_.eos_id();
  g.cancel = opt.cancel;
  if (opt.on_token) g.on_token = [&](int n) { opt.on_token(n, g.max_new_tokens); };
  r.generation = generate_tokens(lm_, r.prompt_ids, sampler, g);
  r.text = py::strip(tok_.decode(r.generation.ids, /*skip_special_tokens=*/true));
  return r;
}

}  // namespace ernie
