#include "server/redis_client.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <random>
#include <thread>

namespace ernie::server {

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::String;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Nil;
  }
  return out;
}

// Error replies that mean "up but not ready": worth waiting for, like a lost connection.
bool transient_error(const std::string& e) {
  return e.rfind("LOADING", 0) == 0 || e.rfind("TRYAGAIN", 0) == 0 || e.rfind("MASTERDOWN", 0) == 0 ||
         e.rfind("BUSY ", 0) == 0;
}

void throw_if_error(const RedisReply& r, const RedisArgs& args) {
  if (r.type != RedisReply::Error) return;
  const std::string what = "redis " + (args.empty() ? std::string("?") : args[0]) + ": " + r.str;
  throw RedisError(transient_error(r.str) ? RedisError::Loading : RedisError::Reply, what);
}

void append(redisContext* c, const RedisArgs& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data()) != REDIS_OK)
    throw RedisError(RedisError::Protocol, "redis: cannot format the command");
}

}  // namespace

const std::string& RedisReply::text() const {
  if (type != String && type != Status) throw RedisError(RedisError::Protocol, "redis: expected a string reply");
  return str;
}

long long RedisReply::as_int() const {
  if (type == Integer) return integer;
  if (type == String && !str.empty() && str.size() < 19 &&
      std::all_of(str.begin() + (str[0] == '-' ? 1 : 0), str.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      str != "-")
    return std::stoll(str);
  throw RedisError(RedisError::Protocol, "redis: expected an integer reply");
}

const std::vector<RedisReply>& RedisReply::array() const {
  if (type != Array) throw RedisError(RedisError::Protocol, "redis: expected an array reply");
  return elements;
}

std::chrono::milliseconds redis_backoff(int attempt, std::chrono::milliseconds initial,
                                        std::chrono::milliseconds max) {
  auto d = std::max(initial, std::chrono::milliseconds(1));
  for (int i = 0; i < attempt && d < max; ++i) d *= 2;
  return std::min(d, max);
}

RedisClient::RedisClient(RedisUrl url, RedisClientOptions opt) : url_(std::move(url)), opt_(opt) {}

RedisClient::~RedisClient() {
  std::lock_guard lk(mu_);
  disconnect();
}

void RedisClient::note_error(const std::string& what) {
  std::lock_guard lk(err_mu_);
  last_error_ = what;
}

std::string RedisClient::last_error() const {
  std::lock_guard lk(err_mu_);
  return last_error_;
}

void RedisClient::connection_failed(const std::string& what) {
  connected_ = false;
  note_error(what);
  throw RedisError(RedisError::Connection, what);
}

void RedisClient::disconnect() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

void RedisClient::ensure_connected() {
  if (ctx_) return;
  const std::string where = format_redis_url(url_);
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(opt_.connect_timeout));
  if (!c) connection_failed("redis " + where + ": out of memory");
  if (c->err) {
    const std::string e = c->errstr;
    redisFree(c);
    connection_failed("redis " + where + ": cannot connect: " + e);
  }
  redisSetTimeout(c, to_timeval(opt_.command_timeout));
  redisEnableKeepAlive(c);
  ctx_ = c;
  if (url_.db != 0) {
    try {
      Conn conn(*this);
      conn.command({"SELECT", std::to_string(url_.db)});  // a Reply error here (no such db) is not retried
    } catch (const RedisError& e) {
      disconnect();
      if (e.kind() == RedisError::Reply) note_error(e.what());
      throw;
    }
  }
  if (ever_connected_) ++reconnects_;
  ever_connected_ = true;
  connected_ = true;
}

RedisReply RedisClient::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) {
    const std::string e = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    disconnect();
    connection_failed("redis " + format_redis_url(url_) + ": " + e);
  }
  RedisReply r = convert(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  connected_ = true;
  return r;
}

RedisReply RedisClient::Conn::command(const RedisArgs& args) {
  append(c_.ctx_, args);
  RedisReply r = c_.read_reply();
  throw_if_error(r, args);
  return r;
}

std::vector<RedisReply> RedisClient::Conn::pipeline(const std::vector<RedisArgs>& cmds) {
  for (const auto& a : cmds) append(c_.ctx_, a);
  std::vector<RedisReply> out;
  out.reserve(cmds.size());
  for (size_t i = 0; i < cmds.size(); ++i) out.push_back(c_.read_reply());
  for (size_t i = 0; i < out.size(); ++i)  // a transient error anywhere: repeat the whole call
    if (out[i].type == RedisReply::Error && transient_error(out[i].str)) throw_if_error(out[i], cmds[i]);
  return out;
}

std::optional<std::vector<RedisReply>> RedisClient::Conn::transaction(const std::vector<RedisArgs>& cmds) {
  std::vector<RedisArgs> all;
  all.reserve(cmds.size() + 2);
  all.push_back({"MULTI"});
  all.insert(all.end(), cmds.begin(), cmds.end());
  all.push_back({"EXEC"});
  std::vector<RedisReply> r = pipeline(all);
  for (size_t i = 0; i + 1 < r.size(); ++i) throw_if_error(r[i], all[i]);  // MULTI and each QUEUED
  const RedisReply& exec = r.back();
  throw_if_error(exec, all.back());
  if (exec.is_nil()) return std::nullopt;
  if (exec.type != RedisReply::Array || exec.elements.size() != cmds.size())
    throw RedisError(RedisError::Protocol, "redis EXEC: unexpected reply");
  return exec.elements;
}

bool RedisClient::wait_before_retry(std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point start,
                                    int attempt) {
  if (stopped_) return false;
  auto delay = redis_backoff(attempt, opt_.backoff_initial, opt_.backoff_max);
  // Up to a quarter less, so that many clients losing one server do not come back in step.
  thread_local std::minstd_rand rng(std::random_device{}());
  delay -= std::chrono::milliseconds(std::uniform_int_distribution<long>(0, delay.count() / 4)(rng));
  if (std::chrono::steady_clock::now() + delay - start > opt_.retry_for) return false;
  stop_cv_.wait_for(lk, delay, [&] { return stopped_.load(); });
  return !stopped_;
}

void RedisClient::stop() {
  stopped_ = true;
  stop_cv_.notify_all();
}

bool RedisClient::ping_once() {
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(opt_.connect_timeout));
  if (!c) return false;
  bool ok = false;
  if (!c->err) {
    redisSetTimeout(c, to_timeval(opt_.connect_timeout));
    // The configured database must answer too: SELECT 16 on a server of 16 databases is an error, and then
    // every request would fail while PING alone says ok.
    ok = true;
    if (url_.db != 0) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "SELECT %d", url_.db));
      ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
    }
    auto* r = ok ? static_cast<redisReply*>(redisCommand(c, "PING")) : nullptr;
    ok = r && r->type == REDIS_REPLY_STATUS && std::string(r->str, r->len) == "PONG";
    if (r) freeReplyObject(r);
  }
  redisFree(c);
  return ok;
}

}  // namespace ernie::server
