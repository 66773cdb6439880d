#include "server/redis_queue.h"

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>

namespace ernie::server {

namespace {

using ms = std::chrono::milliseconds;
constexpr int kMaxWatchRetries = 100;  // WATCH aborts in a row before giving up (contention)

std::string random_hex(size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32));
  static const char* hex = "0123456789abcdef";
  std::lock_guard lk(mu);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += hex[rng() & 15];
  return s;
}

std::string now_ms() {
  return std::to_string(
      std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count());
}

bool terminal(const std::string& s) { return s == "succeeded" || s == "failed" || s == "cancelled"; }

std::string str_or(const RedisReply& r, const std::string& dflt = {}) {
  return r.type == RedisReply::String || r.type == RedisReply::Status ? r.str : dflt;
}

long long int_or(const RedisReply& r, long long dflt = 0) {
  try {
    return r.is_nil() ? dflt : r.as_int();
  } catch (const RedisError&) {
    return dflt;
  }
}

// The value of `field` in a flat [f, v, f, v, ...] array.
std::string field(const RedisReply& flat, const std::string& name) {
  if (flat.type != RedisReply::Array) return {};
  for (size_t i = 0; i + 1 < flat.elements.size(); i += 2)
    if (str_or(flat.elements[i]) == name) return str_or(flat.elements[i + 1]);
  return {};
}

[[noreturn]] void contention(const std::string& what) {
  throw RedisError(RedisError::Reply, "redis: " + what + ": the job kept changing (" +
                                          std::to_string(kMaxWatchRetries) + " aborted transactions)");
}

// The `done` event's data: the result's `info` object with the image count and the attempt that made it.
std::string done_data(const std::string& info, size_t images, const RedisClaim& cl) {
  nlohmann::json d = nlohmann::json::parse(info, nullptr, false);
  if (!d.is_object()) d = nlohmann::json::object();
  d["images"] = images;
  d["attempt"] = cl.attempt;
  return d.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_nogroup(const RedisError& e) { return std::string(e.what()).find("NOGROUP") != std::string::npos; }

}  // namespace

RedisQueue::RedisQueue(const RedisUrl& url, RedisQueueOptions opt) : opt_(std::move(opt)), client_(url, opt_.client) {
  if (opt_.consumer.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "worker");
    opt_.consumer = std::string(host) + "-" + std::to_string(getpid()) + "-" + random_hex(6);
  }
  if (opt_.lease < ms(1)) opt_.lease = ms(1);
  if (opt_.max_attempts < 1) opt_.max_attempts = 1;
}

RedisQueue::~RedisQueue() = default;

ms RedisQueue::max_block() const {
  // A blocking read must return before the socket's read timeout, or it would count as a lost connection.
  return std::max(opt_.client.command_timeout - ms(1000), ms(1));
}

RedisArgs RedisQueue::event_cmd(const std::string& id, const std::string& type, const std::string& data) const {
  return {"XADD", key_events(id), "MAXLEN", "~", std::to_string(opt_.max_events), "*", "type", type, "data", data};
}

std::vector<RedisArgs> RedisQueue::ack_cmds(const std::string& entry) const {
  if (entry.empty()) return {};
  return {{"XACK", key_stream(), kGroup, entry}, {"XDEL", key_stream(), entry}};
}

void RedisQueue::ensure_group(RedisClient::Conn& c) {
  if (group_ready_) return;
  try {
    c.command({"XGROUP", "CREATE", key_stream(), kGroup, "0", "MKSTREAM"});
  } catch (const RedisError& e) {
    if (e.kind() != RedisError::Reply || std::string(e.what()).find("BUSYGROUP") == std::string::npos) throw;
  }
  group_ready_ = true;
}

// ---- api side ------------------------------------------------------------------------------------------

std::string RedisQueue::submit(const std::string& request_json, std::string id) {
  if (id.empty()) id = random_hex(16);
  const std::string job = key_job(id);
  client_.retrying([&](RedisClient::Conn& c) {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job});
      if (c.command({"EXISTS", job}).as_int() != 0) {  // stored already (a repeated call)
        c.command({"UNWATCH"});
        return;
      }
      auto r = c.transaction({{"HSET", job, "request", request_json, "status", "queued", "attempts", "0", "cancel",
                               "0", "created_ms", now_ms()},
                              event_cmd(id, "queued", "{}"),
                              {"XADD", key_stream(), "*", "job", id},
                              {"ZADD", key_recent(), now_ms(), id},
                              {"ZREMRANGEBYRANK", key_recent(), "0", std::to_string(-1 - long(opt_.max_recent))}});
      if (!r) continue;
      for (const auto& x : *r)
        if (x.type == RedisReply::Error) throw RedisError(RedisError::Reply, "redis submit: " + x.str);
      c.command({"HSET", job, "entry", (*r)[2].text()});  // for cancel(): the stream entry to delete
      return;
    }
    contention("submit");
  });
  return id;
}

std::optional<RedisJobStatus> RedisQueue::status(const std::string& id) {
  auto r = client_.retrying([&](RedisClient::Conn& c) {
    return c.pipeline({{"HGETALL", key_job(id)}, {"EXISTS", key_result(id)}});
  });
  const RedisReply& h = r[0];
  if (h.type != RedisReply::Array || h.elements.empty()) return std::nullopt;
  RedisJobStatus s;
  s.id = id;
  s.status = field(h, "status");
  s.owner = field(h, "owner");
  s.error = field(h, "error");
  s.last_error = field(h, "last_error");
  s.request = field(h, "request");
  s.info = field(h, "info");
  auto num = [&](const char* f) { return std::atoll(field(h, f).c_str()); };  // 0 when absent
  s.attempts = int(num("attempts"));
  s.step = int(num("step"));
  s.total = int(num("total"));
  s.created_ms = num("created_ms");
  s.finished_ms = num("finished_ms");
  s.cancel_requested = field(h, "cancel") == "1";
  s.has_result = int_or(r[1]) != 0;
  if (s.status.empty()) {  // a hash without its status (written by an old worker after Redis lost the job)
    s.status = "failed";
    s.error = "the job's record is incomplete (Redis lost it, e.g. a restart without persistence); submit it again";
  }
  return s;
}

std::vector<RedisJobEvent> RedisQueue::events_since(const std::string& id, const std::string& after, ms block,
                                                    size_t count) {
  block = std::min(block, max_block());
  RedisArgs cmd = {"XREAD", "COUNT", std::to_string(std::max<size_t>(count, 1))};
  if (block.count() > 0) {
    cmd.push_back("BLOCK");
    cmd.push_back(std::to_string(block.count()));
  }
  cmd.insert(cmd.end(), {"STREAMS", key_events(id), after.empty() ? "0" : after});
  const RedisReply r = client_.command(cmd);
  std::vector<RedisJobEvent> out;
  if (r.is_nil()) return out;
  for (const auto& stream : r.array()) {
    const auto& s = stream.array();
    if (s.size() < 2) continue;
    for (const auto& e : s[1].array()) {
      const auto& kv = e.array();
      if (kv.size() < 2) continue;
      out.push_back({kv[0].text(), field(kv[1], "type"), field(kv[1], "data")});
    }
  }
  return out;
}

std::optional<std::vector<std::string>> RedisQueue::result(const std::string& id) {
  const RedisReply h = client_.command({"HGETALL", key_result(id)});
  if (h.type != RedisReply::Array || h.elements.empty()) return std::nullopt;
  const std::string n = field(h, "count");
  const int count = n.empty() ? 0 : std::atoi(n.c_str());
  std::vector<std::string> out(static_cast<size_t>(std::max(count, 0)));
  for (size_t i = 0; i + 1 < h.elements.size(); i += 2) {
    const std::string& k = h.elements[i].str;
    if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos || k.size() > 6) continue;
    const size_t idx = std::stoul(k);
    if (idx < out.size()) out[idx] = h.elements[i + 1].str;
  }
  return out;
}

std::vector<std::string> RedisQueue::recent(size_t limit) {
  if (limit == 0) return {};
  const RedisReply r = client_.command({"ZREVRANGE", key_recent(), "0", std::to_string(limit - 1)});
  std::vector<std::string> out;
  for (const auto& e : r.array()) out.push_back(e.text());
  return out;
}

bool RedisQueue::remove(const std::string& id) {
  const std::string job = key_job(id);
  return client_.retrying([&](RedisClient::Conn& c) {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job});
      if (!terminal(str_or(c.command({"HGET", job, "status"})))) {
        c.command({"UNWATCH"});
        return false;
      }
      if (c.transaction({{"DEL", job, key_events(id), key_result(id)}, {"ZREM", key_recent(), id}})) return true;
    }
    contention("remove");
  });
}

void RedisQueue::publish_model(const std::string& json) { client_.command({"SET", opt_.prefix + "model", json}); }

std::optional<std::string> RedisQueue::model() {
  const RedisReply r = client_.command({"GET", opt_.prefix + "model"});
  if (r.is_nil()) return std::nullopt;
  return r.text();
}

RedisQueue::CancelResult RedisQueue::cancel(const std::string& id) {
  const std::string job = key_job(id);
  return client_.retrying([&](RedisClient::Conn& c) {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job});
      const auto h = c.command({"HMGET", job, "status", "entry"}).array();
      const std::string st = str_or(h[0]);
      if (h[0].is_nil()) {
        c.command({"UNWATCH"});
        return CancelResult::NotFound;
      }
      if (terminal(st)) {
        c.command({"UNWATCH"});
        return CancelResult::AlreadyEnded;
      }
      std::vector<RedisArgs> cmds;
      CancelResult res = CancelResult::Requested;
      if (st == "queued") {  // no worker runs it: it ends here, and leaves the stream
        const std::string rec = std::to_string(opt_.record_ttl.count());
        cmds = {{"HSET", job, "cancel", "1", "status", "cancelled", "error", "cancelled", "finished_ms", now_ms()},
                event_cmd(id, "cancelled", R"({"error":"cancelled"})"),
                {"EXPIRE", job, rec},
                {"EXPIRE", key_events(id), rec}};
        const std::string entry = str_or(h[1]);
        if (!entry.empty()) cmds.push_back({"XDEL", key_stream(), entry});
        res = CancelResult::Cancelled;
      } else {
        cmds = {{"HSET", job, "cancel", "1"}};
      }
      if (c.transaction(cmds)) return res;
    }
    contention("cancel");
  });
}

RedisQueueDepth RedisQueue::depth() {
  return client_.retrying([&](RedisClient::Conn& c) {
    RedisQueueDepth d;
    auto r = c.pipeline({{"XLEN", key_stream()}, {"XPENDING", key_stream(), kGroup}});
    d.length = int_or(r[0]);
    if (r[1].type == RedisReply::Array && !r[1].elements.empty()) {
      d.pending = int_or(r[1].elements[0]);
      if (r[1].elements.size() >= 4 && r[1].elements[3].type == RedisReply::Array)
        d.consumers = static_cast<long long>(r[1].elements[3].elements.size());
    }  // NOGROUP (no worker yet): nothing is pending
    d.unclaimed = std::max(0LL, d.length - d.pending);
    return d;
  });
}

long long RedisQueue::result_sets_written() {
  return int_or(client_.command({"GET", opt_.prefix + "stats:result_sets"}));
}

// ---- worker side ---------------------------------------------------------------------------------------

std::optional<RedisClaim> RedisQueue::claim(ms block) {
  block = std::min(block, max_block());
  const auto deadline = std::chrono::steady_clock::now() + block;
  for (;;) {
    // 1. A job whose worker stopped refreshing its lease.
    struct Found {
      std::string entry, id;
      bool reclaimed;
    };
    std::optional<Found> f = client_.retrying([&](RedisClient::Conn& c) -> std::optional<Found> {
      ensure_group(c);
      // One pass over the pending entries at most (each call scans a few; the cursor goes round to 0-0).
      for (int pass = 0; pass < 1000; ++pass) {
        RedisReply r;
        try {
          r = c.command({"XAUTOCLAIM", key_stream(), kGroup, opt_.consumer, std::to_string(opt_.lease.count()),
                         autoclaim_cursor_, "COUNT", "1"});
        } catch (const RedisError& e) {
          if (!is_nogroup(e)) throw;
          group_ready_ = false;  // Redis lost its data (restarted without persistence): make the group again
          autoclaim_cursor_ = "0-0";
          ensure_group(c);
          return std::nullopt;
        }
        const auto& a = r.array();
        if (a.size() < 2) throw RedisError(RedisError::Protocol, "redis XAUTOCLAIM: unexpected reply");
        autoclaim_cursor_ = a[0].text();
        for (const auto& e : a[1].array()) {
          const auto& kv = e.array();
          if (kv.size() < 2) continue;
          const std::string entry = kv[0].text(), id = field(kv[1], "job");
          if (id.empty()) {  // not ours: drop it
            c.pipeline(ack_cmds(entry));
            continue;
          }
          return Found{entry, id, true};
        }
        if (autoclaim_cursor_ == "0-0") break;
      }
      return std::nullopt;
    });
    // 2. Else a job no worker has taken.
    if (!f) {
      const auto left = std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now());
      const long long wait = std::max<long long>(left.count(), 1);
      f = client_.retrying([&](RedisClient::Conn& c) -> std::optional<Found> {
        ensure_group(c);
        RedisReply r;
        try {
          r = c.command({"XREADGROUP", "GROUP", kGroup, opt_.consumer, "COUNT", "1", "BLOCK", std::to_string(wait),
                         "STREAMS", key_stream(), ">"});
        } catch (const RedisError& e) {
          if (!is_nogroup(e)) throw;
          group_ready_ = false;
          ensure_group(c);
          return std::nullopt;
        }
        if (r.is_nil()) return std::nullopt;
        for (const auto& s : r.array()) {
          const auto& sa = s.array();
          if (sa.size() < 2) continue;
          for (const auto& e : sa[1].array()) {
            const auto& kv = e.array();
            if (kv.size() < 2) continue;
            const std::string entry = kv[0].text(), id = field(kv[1], "job");
            if (id.empty()) {
              c.pipeline(ack_cmds(entry));
              continue;
            }
            return Found{entry, id, false};
          }
        }
        return std::nullopt;
      });
    }
    if (f) {
      if (auto cl = settle_claim(f->id, f->entry, f->reclaimed)) return cl;
      continue;  // that one had ended: look again
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
  }
}

std::optional<RedisClaim> RedisQueue::settle_claim(const std::string& id, const std::string& entry, bool reclaimed) {
  const std::string job = key_job(id);
  const std::string rec = std::to_string(opt_.record_ttl.count());
  return client_.retrying([&](RedisClient::Conn& c) -> std::optional<RedisClaim> {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job});
      const auto h = c.command({"HMGET", job, "status", "cancel", "attempts", "last_error", "request", "owner"}).array();
      const std::string st = str_or(h[0]);
      if (h[0].is_nil() || terminal(st)) {  // gone, or ended by someone else: just acknowledge
        c.command({"UNWATCH"});
        c.pipeline(ack_cmds(entry));
        return std::nullopt;
      }
      const int attempts = static_cast<int>(int_or(h[2]));
      std::string last_error = str_or(h[3]);
      if (reclaimed && st == "running")
        last_error = "worker '" + str_or(h[5]) + "' stopped renewing its lease during attempt " +
                     std::to_string(attempts);
      std::vector<RedisArgs> cmds;
      if (str_or(h[1]) == "1") {
        cmds = {{"HSET", job, "status", "cancelled", "error", "cancelled", "finished_ms", now_ms()},
                event_cmd(id, "cancelled", R"({"error":"cancelled"})")};
      } else if (attempts >= opt_.max_attempts) {
        const std::string err = last_error.empty() ? "the job was tried " + std::to_string(attempts) + " times" : last_error;
        cmds = {{"HSET", job, "status", "failed", "error", err, "last_error", last_error, "finished_ms", now_ms()},
                event_cmd(id, "error", nlohmann::json{{"error", err}, {"attempts", attempts}}.dump())};
      }
      if (!cmds.empty()) {
        cmds.push_back({"EXPIRE", job, rec});
        cmds.push_back({"EXPIRE", key_events(id), rec});
        for (auto& a : ack_cmds(entry)) cmds.push_back(a);
        if (!c.transaction(cmds)) continue;
        return std::nullopt;
      }
      const int attempt = attempts + 1;
      nlohmann::json ev = {{"attempt", attempt}, {"worker", opt_.consumer}, {"reclaimed", reclaimed}};
      if (!last_error.empty()) ev["last_error"] = last_error;
      auto r = c.transaction({{"HSET", job, "status", "running", "owner", opt_.consumer, "attempts",
                               std::to_string(attempt), "last_error", last_error, "entry", entry},
                              event_cmd(id, "running", ev.dump())});
      if (!r) continue;
      return RedisClaim{id, entry, str_or(h[4]), attempt, reclaimed};
    }
    contention("claim");
  });
}

RedisQueue::Beat RedisQueue::heartbeat(const RedisClaim& cl) {
  const std::string job = key_job(cl.id);
  return client_.retrying([&](RedisClient::Conn& c) -> Beat {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job});
      const auto h = c.command({"HMGET", job, "status", "owner", "cancel"}).array();
      Beat b;
      b.cancelled = str_or(h[2]) == "1";
      if (str_or(h[0]) != "running" || str_or(h[1]) != opt_.consumer) {
        c.command({"UNWATCH"});
        b.owned = false;
        return b;
      }
      // Owned as the hash says: reset the entry's idle time (JUSTID: no delivery count, no payload).
      auto r = c.transaction({{"XCLAIM", key_stream(), kGroup, opt_.consumer, "0", cl.entry, "JUSTID"}});
      if (!r) continue;
      b.owned = (*r)[0].type == RedisReply::Array && !(*r)[0].elements.empty();
      return b;
    }
    contention("heartbeat");
  });
}

// One script, so a progress write never recreates a job that is gone (Redis restarted without persistence, the
// record expired or was deleted) or writes into a job another worker holds now: the event and the step are
// written only while the hash says `running` by this worker.
constexpr const char* kProgressScript = R"lua(
local h = redis.call('HMGET', KEYS[1], 'status', 'owner', 'cancel')
if h[1] ~= 'running' or h[2] ~= ARGV[1] then return -1 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'type', 'progress', 'data', ARGV[3])
redis.call('HSET', KEYS[1], 'step', ARGV[4], 'total', ARGV[5])
if h[3] == '1' then return 1 end
return 0
)lua";

RedisQueue::Beat RedisQueue::progress(const RedisClaim& cl, int step, int total) {
  const std::string data =
      nlohmann::json{{"phase", "denoise"}, {"step", step}, {"total", total}, {"attempt", cl.attempt}}.dump();
  const long long r = client_.retrying([&](RedisClient::Conn& c) {
    return c.command({"EVAL", kProgressScript, "2", key_job(cl.id), key_events(cl.id), opt_.consumer,
                      std::to_string(opt_.max_events), data, std::to_string(step), std::to_string(total)})
        .as_int();
  });
  Beat b;
  b.owned = r >= 0;
  b.cancelled = r == 1;
  return b;
}

RedisQueue::Finish RedisQueue::end_job(const RedisClaim& cl, const std::string& status,
                                       const std::vector<std::string>* results, const std::string& error,
                                       bool requeue, const std::string& info) {
  const std::string job = key_job(cl.id), res = key_result(cl.id);
  const std::string rec = std::to_string(opt_.record_ttl.count());
  return client_.retrying([&](RedisClient::Conn& c) -> Finish {
    for (int i = 0; i < kMaxWatchRetries; ++i) {
      c.command({"WATCH", job, res});
      const auto r = c.pipeline({{"HMGET", job, "status", "attempts"}, {"EXISTS", res}});
      const auto& h = r[0].array();
      if (h[0].is_nil() || terminal(str_or(h[0])) || int_or(r[1]) != 0) {
        c.command({"UNWATCH"});  // ended already (by another run of the job): only acknowledge
        c.pipeline(ack_cmds(cl.entry));
        return Finish::AlreadyEnded;
      }
      const int attempts = static_cast<int>(int_or(h[1]));
      std::vector<RedisArgs> cmds;
      const bool again = requeue && attempts < opt_.max_attempts;
      if (again) {
        cmds = {{"HSET", job, "status", "queued", "owner", "", "last_error", error},
                event_cmd(cl.id, "retry", nlohmann::json{{"error", error}, {"attempt", cl.attempt}}.dump())};
      } else if (status == "succeeded") {
        RedisArgs hs = {"HSET", res, "count", std::to_string(results->size()), "attempt", std::to_string(cl.attempt),
                       "worker", opt_.consumer, "info", info};
        for (size_t k = 0; k < results->size(); ++k) {
          hs.push_back(std::to_string(k));
          hs.push_back((*results)[k]);
        }
        cmds = {hs,
                {"EXPIRE", res, std::to_string(opt_.result_ttl.count())},
                {"INCR", opt_.prefix + "stats:result_sets"},
                {"HSET", job, "status", "succeeded", "finished_ms", now_ms(), "info", info},
                event_cmd(cl.id, "done", done_data(info, results->size(), cl))};
      } else {
        cmds = {{"HSET", job, "status", status, "error", error, "finished_ms", now_ms()},
                event_cmd(cl.id, status == "cancelled" ? "cancelled" : "error",
                          nlohmann::json{{"error", error}, {"attempt", cl.attempt}}.dump())};
      }
      if (!again) {
        cmds.push_back({"EXPIRE", job, rec});
        cmds.push_back({"EXPIRE", key_events(cl.id), rec});
      }
      for (auto& a : ack_cmds(cl.entry)) cmds.push_back(a);  // after the result, in the same transaction
      if (again) cmds.push_back({"XADD", key_stream(), "*", "job", cl.id});
      auto out = c.transaction(cmds);
      if (!out) continue;
      for (const auto& x : *out)
        if (x.type == RedisReply::Error) throw RedisError(RedisError::Reply, "redis end of job: " + x.str);
      if (again) {
        c.command({"HSET", job, "entry", out->back().text()});
        return Finish::Requeued;
      }
      return Finish::Stored;
    }
    contention("end of job");
  });
}

RedisQueue::Finish RedisQueue::complete(const RedisClaim& c, const std::vector<std::string>& results,
                                        const std::string& info) {
  return end_job(c, "succeeded", &results, {}, false, info);
}

RedisQueue::Finish RedisQueue::fail(const RedisClaim& c, const std::string& error, bool retryable) {
  return end_job(c, "failed", nullptr, error, retryable);
}

RedisQueue::Finish RedisQueue::cancelled(const RedisClaim& c) {
  return end_job(c, "cancelled", nullptr, "cancelled", false);
}

// ---- lease keeper --------------------------------------------------------------------------------------

RedisLeaseKeeper::RedisLeaseKeeper(const RedisUrl& url, const RedisQueueOptions& opt, RedisClaim claim)
    : q_(url, opt), claim_(std::move(claim)) {
  thread_ = std::thread([this] {
    const auto period = std::max(q_.options().lease / 3, ms(1));
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, period, [&] { return stop_; })) {
      lk.unlock();
      try {
        const auto b = q_.heartbeat(claim_);
        ++beats_;
        if (!b.owned) lost_ = true;
        if (b.cancelled) cancelled_ = true;
      } catch (const RedisError&) {
        // Redis unreachable past the client's retry time: try again next period.
      }
      lk.lock();
      if (lost_) break;
    }
  });
}

void RedisLeaseKeeper::release() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  q_.stop();
  if (thread_.joinable()) thread_.join();
}

RedisLeaseKeeper::~RedisLeaseKeeper() { release(); }

// ---- worker loop ---------------------------------------------------------------------------------------

RedisWorker::RedisWorker(const RedisUrl& url, RedisQueueOptions opt, Runner run)
    : url_(url), q_(url, std::move(opt)), run_(std::move(run)) {}

RedisWorker::~RedisWorker() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void RedisWorker::start() {
  thread_ = std::thread([this] { loop(); });
}

void RedisWorker::stop() { stop_ = true; }

void RedisWorker::loop() {
  int errors_in_row = 0;
  while (!stop_) {
    try {
      const auto c = q_.claim(ms(200));
      errors_in_row = 0;
      if (c) run_one(*c);
    } catch (const std::exception&) {
      // Redis away for longer than the client's retry time, a bad reply, no thread for the lease keeper:
      // wait and try again (a job we held is taken over after its lease).
      ++redis_errors;
      busy_ = false;
      const auto d = redis_backoff(errors_in_row++, ms(100), ms(2000));
      for (auto waited = ms(0); waited < d && !stop_; waited += ms(20)) std::this_thread::sleep_for(ms(20));
    }
  }
}

void RedisWorker::run_one(const RedisClaim& c) {
  busy_ = true;
  struct NotBusy {
    std::atomic<bool>& b;
    ~NotBusy() { b = false; }
  } not_busy{busy_};
  RedisLeaseKeeper keeper(url_, q_.options(), c);
  bool cancel = false, gone = false, told_to_stop = false;
  auto progress = [&](int step, int total) {
    const RedisQueue::Beat b = q_.progress(c, step, total);
    if (b.cancelled || keeper.cancel_seen()) cancel = true;
    if (!b.owned) gone = true;  // taken over, or the job is gone: never end it from here
    if (cancel || gone || keeper.lost()) told_to_stop = true;
    return told_to_stop;
  };
  if (c.reclaimed) ++claims_reclaimed;
  else if (c.attempt > 1) ++claims_retry;
  else ++claims_first;
  RedisResult result;
  try {
    result = run_(c, progress);
  } catch (const RedisError&) {
    throw;  // the queue's own calls: the loop waits and goes on; the lease runs out and the job is retried
  } catch (const RedisRetryableError& e) {
    keeper.release();
    const auto f = q_.fail(c, e.what(), true);
    if (f == RedisQueue::Finish::Requeued) ++retried;
    if (f == RedisQueue::Finish::Stored) ++failed;  // out of attempts
    return;
  } catch (const std::exception& e) {
    keeper.release();
    if (q_.fail(c, e.what(), false) == RedisQueue::Finish::Stored) ++failed;
    return;
  }
  keeper.release();
  if (gone) {
    ++lost;
    return;
  }
  if (cancel) {
    if (q_.cancelled(c) == RedisQueue::Finish::Stored) ++cancelled;
    return;
  }
  if (told_to_stop) {  // taken over mid-run: the runner stopped early, the other worker finishes the job
    ++lost;
    return;
  }
  // Done (even if the lease was lost meanwhile: the first result stored is the job's, the later one is not).
  if (q_.complete(c, result.images, result.info) == RedisQueue::Finish::Stored) ++succeeded;
}

}  // namespace ernie::server
