// A small synchronous Redis client over hiredis for the shared job queue (server/redis_queue.h): one
// connection, commands as argument vectors (binary-safe), replies copied into plain values and checked.
// A lost connection (refused, reset, timed out) and a server still loading its data (LOADING after a
// restart) are retried: the client reconnects with capped exponential backoff until `retry_for` has passed,
// then throws RedisError of kind Connection. An error reply throws RedisError of kind Reply at once.
//
// Thread safety: one mutex guards the connection, held for a whole `retrying` call, so threads may share a
// client; a blocking command (XREADGROUP BLOCK, XREAD BLOCK) holds it for its block time, so give blocking
// readers their own client.
//
// A command retried after a lost connection may have run once already (the reply was lost, not the
// command): the queue's writes are built to be safe to repeat (see redis_queue.h).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/redis_url.h"

struct redisContext;

namespace ernie::server {

class RedisError : public std::runtime_error {
 public:
  enum Kind {
    Connection,  // could not connect, or the connection broke (retried until retry_for)
    Loading,     // the server answered LOADING/TRYAGAIN/MASTERDOWN: up but not ready (retried)
    Reply,       // an error reply to the command (not retried)
    Protocol,    // a reply of an unexpected shape
  };
  RedisError(Kind k, const std::string& what) : std::runtime_error(what), kind_(k) {}
  Kind kind() const { return kind_; }
  bool retryable() const { return kind_ == Connection || kind_ == Loading; }

 private:
  Kind kind_;
};

struct RedisReply {
  enum Type { Nil, String, Status, Integer, Array, Error };
  Type type = Nil;
  std::string str;  // String, Status, Error
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Nil; }
  // The text of a String or Status reply; throws RedisError(Protocol) otherwise.
  const std::string& text() const;
  // An Integer, or a String of digits (HGET of a counter); throws RedisError(Protocol) otherwise.
  long long as_int() const;
  const std::vector<RedisReply>& array() const;  // throws RedisError(Protocol) unless Array
};

using RedisArgs = std::vector<std::string>;

struct RedisClientOptions {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds command_timeout{10000};  // socket read/write timeout; above every BLOCK used
  std::chrono::milliseconds retry_for{30000};        // give up on a lost connection after this long
  std::chrono::milliseconds backoff_initial{50};     // first wait before reconnecting; doubles each time
  std::chrono::milliseconds backoff_max{2000};       // the cap on that wait
};

// The delay before reconnect attempt `attempt` (0-based): initial * 2^attempt, capped at `max`.
std::chrono::milliseconds redis_backoff(int attempt, std::chrono::milliseconds initial,
                                        std::chrono::milliseconds max);

class RedisClient {
 public:
  // Connects lazily: the first command connects (and retries like any lost connection).
  explicit RedisClient(RedisUrl url, RedisClientOptions opt = {});
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // One connection's commands, for use inside `retrying`. Each throws RedisError; a Connection error
  // leaves the connection dropped so that `retrying` reconnects.
  class Conn {
   public:
    // One command; an error reply throws RedisError(Reply) (LOADING and the like: Loading).
    RedisReply command(const RedisArgs& args);
    // Sends all commands in one write and reads every reply; error replies come back as values.
    std::vector<RedisReply> pipeline(const std::vector<RedisArgs>& cmds);
    // MULTI, the commands, EXEC in one round trip. Nothing when EXEC aborted (a WATCHed key changed);
    // otherwise the commands' replies (error replies as values). A command refused while queueing throws.
    std::optional<std::vector<RedisReply>> transaction(const std::vector<RedisArgs>& cmds);

   private:
    friend class RedisClient;
    explicit Conn(RedisClient& c) : c_(c) {}
    RedisClient& c_;
  };

  // Runs `f` with the connection, holding the client's mutex. When `f` throws a RedisError the connection
  // is dropped (so no WATCH or MULTI outlives `f`); a retryable one is retried: after the backoff delay the
  // client reconnects and runs `f` again from the start (so `f` must be safe to repeat). Gives up after
  // `retry_for`, or at once after stop(), rethrowing the last error.
  template <class F>
  auto retrying(F&& f) -> decltype(f(std::declval<Conn&>())) {
    std::unique_lock lk(mu_);
    const auto start = std::chrono::steady_clock::now();
    for (int attempt = 0;; ++attempt) {
      try {
        ensure_connected();
        Conn c(*this);
        return f(c);
      } catch (const RedisError& e) {
        disconnect();  // a fresh connection next time: no WATCH or MULTI left over from `f`
        if (!e.retryable() || !wait_before_retry(lk, start, attempt)) throw;
      }
    }
  }

  RedisReply command(const RedisArgs& args) {
    return retrying([&](Conn& c) { return c.command(args); });
  }

  // SELECT of the configured database and one PING on a new connection, no retries, bounded by the connect
  // and command timeouts; false when Redis cannot be reached or that database does not answer (for /health).
  bool ping_once();

  bool connected() const { return connected_.load(); }  // the last command reached the server
  uint64_t reconnects() const { return reconnects_.load(); }  // connections made after the first
  std::string last_error() const;
  const RedisUrl& url() const { return url_; }

  // Makes every running and later `retrying` give up at its next failure instead of waiting (shutdown).
  void stop();

 private:
  void ensure_connected();  // with mu_ held; throws RedisError(Connection)
  void disconnect();        // with mu_ held
  bool wait_before_retry(std::unique_lock<std::mutex>& lk, std::chrono::steady_clock::time_point start,
                         int attempt);
  RedisReply read_reply();  // with mu_ held
  [[noreturn]] void connection_failed(const std::string& what);
  void note_error(const std::string& what);

  RedisUrl url_;
  RedisClientOptions opt_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  redisContext* ctx_ = nullptr;
  bool ever_connected_ = false;
  std::atomic<bool> connected_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> reconnects_{0};
  mutable std::mutex err_mu_;
  std::string last_error_;
};

}  // namespace ernie::server
