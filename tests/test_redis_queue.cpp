// server/redis_queue.h and redis_client.h against a real redis-server of the test's own (tests/redis_server.h):
// the api and worker sides of the shared queue with a fake engine (a function that makes bytes), workers
// in threads, a worker that dies mid-job, a Redis restart mid-run, cancel, attempts and the depth numbers.
// Every wait is bounded; each test skips when redis-server is not installed.
#if ERNIE_HAVE_REDIS
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "redis_server.h"
#include "server/redis_client.h"
#include "server/redis_metrics.h"
#include "server/redis_queue.h"

using namespace ernie::server;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class RedisQueueTest : public ::testing::Test {
 protected:
  void start(bool aof = false) {
    server_ = std::make_unique<ernie::test::RedisServer>(aof);
    if (!server_->installed()) GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh --tests installs it)";
    std::string why;
    ASSERT_TRUE(server_->start(&why)) << why;
    url_ = {"127.0.0.1", server_->port(), 0};
  }
  RedisQueueOptions options(const std::string& consumer, std::chrono::milliseconds lease = 2000ms) {
    RedisQueueOptions o;
    o.consumer = consumer;
    o.lease = lease;
    o.client.retry_for = 15s;
    o.client.backoff_initial = 20ms;
    o.client.backoff_max = 500ms;
    o.client.connect_timeout = 500ms;
    return o;
  }
  RedisReply raw(const RedisArgs& args) {
    if (!raw_) raw_ = std::make_unique<RedisClient>(url_);
    return raw_->command(args);
  }
  long long xpending(const std::string& stream = "ernie:jobs") {
    const RedisReply r = raw({"XPENDING", stream, "workers"});
    return r.array()[0].as_int();
  }
  long long xlen(const std::string& stream = "ernie:jobs") { return raw({"XLEN", stream}).as_int(); }

  std::unique_ptr<ernie::test::RedisServer> server_;
  RedisUrl url_;
  std::unique_ptr<RedisClient> raw_;
};

// The fake engine: the request {"steps": N, "step_ms": M, "tag": T} makes one "image", "img:" + T.
std::string fake_request(const std::string& tag, int steps = 4, int step_ms = 20) {
  return nlohmann::json{{"steps", steps}, {"step_ms", step_ms}, {"tag", tag}}.dump();
}
std::string fake_image(const std::string& request) {
  return "img:" + nlohmann::json::parse(request).at("tag").get<std::string>();
}

// One worker: claims, keeps the lease, runs the steps with progress, stores the result. `die_after_steps`
// >= 0: on its first job it stops after that many steps, stops refreshing, never acks and quits (a crash).
struct FakeWorker {
  RedisUrl url;
  RedisQueueOptions opt;
  std::atomic<bool>* stop;
  int die_after_steps = -1;
  std::atomic<int> completed{0}, duplicates{0}, errors{0};
  std::string died_on;
  Clock::time_point died_at;
  std::thread thread;

  ~FakeWorker() {  // a test that failed early: stop every worker sharing the flag, and wait
    if (stop) *stop = true;
    join();
  }
  void start() {
    thread = std::thread([this] { run(); });
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
  void run() {
    RedisQueue q(url, opt);
    while (!stop->load()) {
      try {
        auto c = q.claim(100ms);
        if (!c) continue;
        const auto req = nlohmann::json::parse(c->request);
        const int steps = req.at("steps"), step_ms = req.at("step_ms");
        RedisLeaseKeeper keeper(url, q.options(), *c);
        bool cancel = false, lost = false;
        for (int s = 1; s <= steps && !cancel && !lost; ++s) {
          std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
          cancel = q.progress(*c, s, steps).cancelled || keeper.cancel_seen();
          lost = keeper.lost();
          if (die_after_steps >= 0 && s == die_after_steps) {
            keeper.release();  // the process is gone: no more heartbeats, no ack
            died_on = c->id;
            died_at = Clock::now();
            return;
          }
        }
        if (lost) continue;  // another worker has it now
        if (cancel) {
          q.cancelled(*c);
          continue;
        }
        if (q.complete(*c, {fake_image(c->request)}) == RedisQueue::Finish::Stored)
          ++completed;
        else
          ++duplicates;
      } catch (const RedisError&) {
        ++errors;  // Redis away for longer than the client's retry time: try again
        std::this_thread::sleep_for(20ms);
      }
    }
  }
};

// Polls `pred` every 10 ms until it holds or `limit` passes.
template <class P>
bool wait_for(P pred, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

}  // namespace

TEST(RedisClientPure, BackoffDoublesToItsCap) {
  EXPECT_EQ(redis_backoff(0, 50ms, 2000ms), 50ms);
  EXPECT_EQ(redis_backoff(1, 50ms, 2000ms), 100ms);
  EXPECT_EQ(redis_backoff(5, 50ms, 2000ms), 1600ms);
  EXPECT_EQ(redis_backoff(6, 50ms, 2000ms), 2000ms);
  EXPECT_EQ(redis_backoff(1000, 50ms, 2000ms), 2000ms);
}

TEST_F(RedisQueueTest, ClientRepliesErrorsAndGivesUpOnADeadServer) {
  start();
  RedisClientOptions o;
  o.retry_for = 400ms;
  o.backoff_initial = 10ms;
  o.connect_timeout = 200ms;
  RedisClient c(url_, o);
  EXPECT_EQ(c.command({"SET", "k", std::string("a\0b", 3)}).text(), "OK");
  EXPECT_EQ(c.command({"GET", "k"}).str, std::string("a\0b", 3));  // binary-safe
  EXPECT_TRUE(c.command({"GET", "missing"}).is_nil());
  try {
    c.command({"INCR", "k"});
    FAIL() << "an error reply must throw";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Reply);
    EXPECT_NE(std::string(e.what()).find("not an integer"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.ping_once());
  server_->stop(true);
  EXPECT_FALSE(c.ping_once());
  const auto t0 = Clock::now();
  try {
    c.command({"GET", "k"});
    FAIL() << "a dead server must throw after retry_for";
  } catch (const RedisError& e) {
    EXPECT_EQ(e.kind(), RedisError::Connection) << e.what();
  }
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, 200ms);  // it did back off and retry
  EXPECT_LT(took, 3s);
  EXPECT_FALSE(c.connected());
  // A wrong database number is a reply error, not retried.
  ASSERT_TRUE(server_->restart(true));
  RedisClient bad({"127.0.0.1", server_->port(), 60000}, o);
  EXPECT_THROW(bad.command({"PING"}), RedisError);
  // /health's probe selects the configured database: /16 and /65535 do not exist on a 16-database server.
  EXPECT_FALSE(bad.ping_once());
  EXPECT_FALSE(RedisClient({"127.0.0.1", server_->port(), 16}, o).ping_once());
  EXPECT_TRUE(RedisClient({"127.0.0.1", server_->port(), 15}, o).ping_once());
}

// Issue 45, item 11: Redis restarted without persistence while a worker held a job. Its progress writes must
// not recreate the job (a hash with no status and no TTL, an event stream that never ends); a record left
// without its status reads as failed; the worker stops and ends nothing.
TEST_F(RedisQueueTest, ProgressNeverRecreatesAJobThatIsGone) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue w(url_, options("w1"));
  const std::string id = api.submit(fake_request("a"));
  auto c = w.claim(1s);
  ASSERT_TRUE(c);
  EXPECT_TRUE(w.progress(*c, 1, 4).owned);
  raw({"FLUSHALL"});  // what a restart without persistence leaves
  const RedisQueue::Beat b = w.progress(*c, 2, 4);
  EXPECT_FALSE(b.owned);
  EXPECT_EQ(raw({"EXISTS", "ernie:job:" + id, "ernie:job:" + id + ":events"}).as_int(), 0);
  EXPECT_FALSE(api.status(id));  // 404, not a zombie
  EXPECT_EQ(w.complete(*c, {"img"}), RedisQueue::Finish::AlreadyEnded);
  EXPECT_EQ(raw({"EXISTS", "ernie:job:" + id, "ernie:job:" + id + ":result"}).as_int(), 0);

  // Another worker's job: no progress is written into it.
  const std::string other = api.submit(fake_request("b"));
  auto c2 = w.claim(1s);
  ASSERT_TRUE(c2);
  RedisClaim stranger = *c2;
  RedisQueue w2(url_, options("w2"));
  EXPECT_FALSE(w2.progress(stranger, 1, 4).owned);
  EXPECT_EQ(api.status(other)->step, 0);

  // A hash that lost its status (written by a worker of an older build) is a failed job to the client.
  raw({"HSET", "ernie:job:zombie", "step", "20", "total", "20"});
  const auto z = api.status("zombie");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->status, "failed");
  EXPECT_NE(z->error.find("Redis lost it"), std::string::npos) << z->error;
}

// The worker loop with Redis flushed mid-run: the runner is told to stop, and the job is neither recreated
// nor counted as succeeded.
TEST_F(RedisQueueTest, WorkerStopsOnAJobThatIsGone) {
  start();
  RedisQueue api(url_, options("api"));
  std::atomic<int> stopped_at{0};
  RedisWorker worker(url_, options("w1"), [&](const RedisClaim&, const RedisWorker::Progress& progress) {
    for (int s = 1; s <= 200; ++s) {
      std::this_thread::sleep_for(10ms);
      if (s == 3) raw({"FLUSHALL"});
      if (progress(s, 200)) {
        stopped_at = s;
        return RedisResult{};
      }
    }
    return RedisResult{{"img"}};
  });
  const std::string id = api.submit(fake_request("a"));
  worker.start();
  ASSERT_TRUE(wait_for([&] { return worker.lost.load() == 1; }, 5s));
  EXPECT_EQ(stopped_at.load(), 3);
  EXPECT_EQ(worker.succeeded.load(), 0u);
  EXPECT_EQ(raw({"EXISTS", "ernie:job:" + id, "ernie:job:" + id + ":events", "ernie:job:" + id + ":result"}).as_int(),
            0);
  worker.stop();
}

TEST_F(RedisQueueTest, OneJobEndToEnd) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue w(url_, options("w1"));
  const std::string id = api.submit(fake_request("a"));
  auto st = api.status(id);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->status, "queued");
  EXPECT_EQ(api.submit(fake_request("other"), id), id);  // a repeated submit leaves the job alone
  EXPECT_EQ(api.status(id)->request, fake_request("a"));
  EXPECT_EQ(xlen(), 1);
  EXPECT_FALSE(api.status("nope"));

  auto c = w.claim(1s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, id);
  EXPECT_EQ(c->attempt, 1);
  EXPECT_FALSE(c->reclaimed);
  EXPECT_EQ(api.status(id)->status, "running");
  EXPECT_EQ(api.status(id)->owner, "w1");
  EXPECT_FALSE(w.progress(*c, 1, 2).cancelled);
  EXPECT_TRUE(w.heartbeat(*c).owned);
  EXPECT_EQ(w.complete(*c, {std::string("\x89PNG\0x", 6), "second"}), RedisQueue::Finish::Stored);
  EXPECT_EQ(w.complete(*c, {"again"}), RedisQueue::Finish::AlreadyEnded);  // one result set
  EXPECT_EQ(api.status(id)->status, "succeeded");
  EXPECT_TRUE(api.status(id)->has_result);
  const auto res = api.result(id);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->size(), 2u);
  EXPECT_EQ((*res)[0], std::string("\x89PNG\0x", 6));
  EXPECT_EQ((*res)[1], "second");
  EXPECT_EQ(api.result_sets_written(), 1);
  EXPECT_EQ(xlen(), 0);  // acknowledged and deleted
  EXPECT_EQ(xpending(), 0);
  EXPECT_GT(raw({"TTL", "ernie:job:" + id + ":result"}).as_int(), 0);
  EXPECT_GT(raw({"TTL", "ernie:job:" + id}).as_int(), 0);

  // Events: in order, with stream ids that resume.
  const auto ev = api.events_since(id, "0");
  std::vector<std::string> types;
  for (const auto& e : ev) types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<std::string>{"queued", "running", "progress", "done"}));
  ASSERT_EQ(ev.size(), 4u);
  const auto rest = api.events_since(id, ev[1].id);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].id, ev[2].id);
  EXPECT_EQ(nlohmann::json::parse(rest[0].data).at("step"), 1);
  EXPECT_TRUE(api.events_since(id, ev[3].id).empty());
  EXPECT_THROW(api.events_since(id, "not-an-id"), RedisError);
}

TEST_F(RedisQueueTest, EventsWaitForTheNextOne) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue w(url_, options("w1"));
  const std::string id = api.submit(fake_request("a"));
  auto c = w.claim(1s);
  ASSERT_TRUE(c);
  const auto last = api.events_since(id, "0").back().id;
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    w.progress(*c, 1, 1);
  });
  const auto t0 = Clock::now();
  const auto ev = api.events_since(id, last, 3000ms);
  t.join();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, "progress");
  EXPECT_LT(Clock::now() - t0, 2500ms);

  // A wait longer than the socket's read timeout is cut to below it: nothing new, and no error.
  auto o = options("api2");
  o.client.command_timeout = 1500ms;
  RedisQueue short_timeout(url_, o);
  const auto t1 = Clock::now();
  EXPECT_TRUE(short_timeout.events_since(id, ev[0].id, 10000ms).empty());
  EXPECT_LT(Clock::now() - t1, 1400ms);
  EXPECT_EQ(short_timeout.client().reconnects(), 0u);
}

TEST_F(RedisQueueTest, DepthMatchesXlenAndXpending) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue w(url_, options("w1"));
  EXPECT_EQ(api.depth().length, 0);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(api.submit(fake_request(std::to_string(i))));
  auto d = api.depth();
  EXPECT_EQ(d.length, 5);
  EXPECT_EQ(d.pending, 0);
  EXPECT_EQ(d.unclaimed, 5);
  auto a = w.claim(1s), b = w.claim(1s);
  ASSERT_TRUE(a && b);
  d = api.depth();
  EXPECT_EQ(d.length, xlen());
  EXPECT_EQ(d.pending, xpending());
  EXPECT_EQ(d.length, 5);
  EXPECT_EQ(d.pending, 2);
  EXPECT_EQ(d.unclaimed, 3);
  EXPECT_EQ(d.consumers, 1);
  std::string m;
  render_redis_metrics(m, d, nullptr);
  EXPECT_NE(m.find("\nernie_redis_up 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_shared_queue_length 5\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_shared_queue_pending 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_shared_queue_unclaimed 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_shared_queue_busy_workers 1\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("ernie_worker_busy"), std::string::npos);  // an api node has no worker
  m.clear();
  render_redis_metrics(m, std::nullopt, nullptr);
  EXPECT_NE(m.find("\nernie_redis_up 0\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("ernie_shared_queue_length"), std::string::npos);
  w.complete(*a, {"x"});
  d = api.depth();
  EXPECT_EQ(d.length, xlen());
  EXPECT_EQ(d.pending, xpending());
  EXPECT_EQ(d.length, 4);
  EXPECT_EQ(d.pending, 1);
  EXPECT_EQ(d.unclaimed, 3);
}

TEST_F(RedisQueueTest, CancelQueuedAndRunning) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue w(url_, options("w1"));
  const std::string first = api.submit(fake_request("1")), second = api.submit(fake_request("2"));
  EXPECT_EQ(api.cancel(first), RedisQueue::CancelResult::Cancelled);
  EXPECT_EQ(api.status(first)->status, "cancelled");
  EXPECT_EQ(api.events_since(first, "0").back().type, "cancelled");
  EXPECT_EQ(xlen(), 1);  // it left the stream
  EXPECT_EQ(api.cancel(first), RedisQueue::CancelResult::AlreadyEnded);
  EXPECT_EQ(api.cancel("nope"), RedisQueue::CancelResult::NotFound);

  auto c = w.claim(1s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->id, second);  // the cancelled one is not run
  EXPECT_FALSE(w.progress(*c, 1, 3).cancelled);
  EXPECT_EQ(api.cancel(second), RedisQueue::CancelResult::Requested);
  EXPECT_EQ(api.status(second)->status, "running");
  EXPECT_TRUE(api.status(second)->cancel_requested);
  EXPECT_TRUE(w.progress(*c, 2, 3).cancelled);  // seen between steps
  EXPECT_TRUE(w.heartbeat(*c).cancelled);
  EXPECT_EQ(w.cancelled(*c), RedisQueue::Finish::Stored);
  EXPECT_EQ(api.status(second)->status, "cancelled");
  EXPECT_FALSE(api.result(second));
  EXPECT_EQ(api.events_since(second, "0").back().type, "cancelled");
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(xpending(), 0);
  EXPECT_FALSE(w.claim(50ms));
}

TEST_F(RedisQueueTest, LostLeasesCountAsAttemptsUntilTheJobFails) {
  start();
  RedisQueue api(url_, options("api"));
  auto o = options("", 400ms);
  o.max_attempts = 2;
  o.consumer = "w1";
  RedisQueue w1(url_, o);
  o.consumer = "w2";
  RedisQueue w2(url_, o);
  o.consumer = "w3";
  RedisQueue w3(url_, o);
  const std::string id = api.submit(fake_request("a"));
  auto c1 = w1.claim(1s);
  ASSERT_TRUE(c1);
  EXPECT_FALSE(w2.claim(50ms));  // leased to w1
  std::this_thread::sleep_for(450ms);  // w1 sends no heartbeat: the lease runs out
  auto c2 = w2.claim(1s);
  ASSERT_TRUE(c2);
  EXPECT_TRUE(c2->reclaimed);
  EXPECT_EQ(c2->attempt, 2);
  EXPECT_EQ(c2->entry, c1->entry);
  EXPECT_NE(api.status(id)->last_error.find("'w1' stopped renewing its lease"), std::string::npos);
  EXPECT_FALSE(w1.heartbeat(*c1).owned);  // w1 learns it lost the job
  std::this_thread::sleep_for(450ms);
  EXPECT_FALSE(w3.claim(300ms));  // out of attempts: settled as failed, nothing to run
  const auto st = api.status(id);
  EXPECT_EQ(st->status, "failed");
  EXPECT_NE(st->error.find("'w2' stopped renewing its lease during attempt 2"), std::string::npos) << st->error;
  EXPECT_EQ(api.events_since(id, "0").back().type, "error");
  EXPECT_EQ(w2.complete(*c2, {"late"}), RedisQueue::Finish::AlreadyEnded);  // a late result is not stored
  EXPECT_FALSE(api.result(id));
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(xpending(), 0);

  // A retryable failure goes back to the queue; the last attempt's error is the job's.
  const std::string id2 = api.submit(fake_request("b"));
  auto r1 = w1.claim(1s);
  ASSERT_TRUE(r1);
  EXPECT_EQ(w1.fail(*r1, "out of memory", true), RedisQueue::Finish::Requeued);
  EXPECT_EQ(api.status(id2)->status, "queued");
  auto r2 = w2.claim(1s);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->attempt, 2);
  EXPECT_EQ(w2.fail(*r2, "out of memory again", true), RedisQueue::Finish::Stored);
  EXPECT_EQ(api.status(id2)->status, "failed");
  EXPECT_EQ(api.status(id2)->error, "out of memory again");
  EXPECT_EQ(xlen(), 0);
}

// The issue's proof, on the queue alone: 3 workers take 24 jobs; one dies in the middle of a job and that
// job completes on another within lease + run time; a job longer than the lease stays with its worker
// (the lease keeper refreshes it); every job ends with exactly one result set.
TEST_F(RedisQueueTest, WorkersShareJobsAndADeadWorkersJobIsTakenOver) {
  start();
  const auto lease = 1000ms;
  RedisQueue api(url_, options("api"));
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (int i = 0; i < 3; ++i) {
    auto w = std::make_unique<FakeWorker>();
    w->url = url_;
    w->opt = options("w" + std::to_string(i), lease);
    w->stop = &stop;
    if (i == 0) w->die_after_steps = 2;
    workers.push_back(std::move(w));
  }
  std::vector<std::string> ids;
  const std::string long_job = api.submit(fake_request("long", 12, 150), "long-job");  // 1.8 s > lease
  ids.push_back(long_job);
  const auto t0 = Clock::now();
  workers[1]->start();  // takes the long job; w0 (which dies) starts once it has
  ASSERT_TRUE(wait_for([&] { return api.status(long_job)->status == "running"; }, 5s));
  for (int i = 0; i < 23; ++i) ids.push_back(api.submit(fake_request("j" + std::to_string(i), 4, 25)));
  workers[0]->start();
  workers[2]->start();
  const bool all_ended = wait_for(
      [&] {
        for (const auto& id : ids) {
          const auto st = api.status(id);
          if (!st || st->status != "succeeded") return false;
        }
        return true;
      },
      20s);
  stop = true;
  for (auto& w : workers) w->join();
  ASSERT_TRUE(all_ended) << "not every job succeeded within 20 s";
  const auto took = Clock::now() - t0;

  ASSERT_FALSE(workers[0]->died_on.empty());
  const std::string dead = workers[0]->died_on;
  const auto dead_st = api.status(dead);
  EXPECT_EQ(dead_st->attempts, 2);
  EXPECT_NE(dead_st->last_error.find("'w0' stopped renewing"), std::string::npos);
  // Completed within lease + its run time (+ slack for a loaded machine): the done event's stream id is its
  // time in ms.
  const auto ev = api.events_since(dead, "0");
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().type, "done");
  EXPECT_EQ(nlohmann::json::parse(ev.back().data).at("attempt"), 2);
  int done_events = 0;
  for (const auto& e : ev) done_events += e.type == "done";
  EXPECT_EQ(done_events, 1);
  const auto req = nlohmann::json::parse(dead_st->request);
  const auto run_ms = req.at("steps").get<int>() * req.at("step_ms").get<int>();
  const long long died_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch() - (Clock::now() - workers[0]->died_at))
                                .count();
  const long long done_ms = std::stoll(ev.back().id.substr(0, ev.back().id.find('-')));
  EXPECT_LE(done_ms - died_ms, lease.count() + run_ms + 2000) << "the dead worker's job was taken over late";

  // The long job kept its worker: its lease was refreshed.
  EXPECT_EQ(api.status(long_job)->attempts, 1);
  EXPECT_EQ(api.status(long_job)->owner, "w1");
  int results = 0;
  for (const auto& id : ids) {
    const auto st = api.status(id);
    if (id != dead) {
      EXPECT_EQ(st->attempts, 1) << id;
    }
    const auto r = api.result(id);
    ASSERT_TRUE(r) << id;
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0], fake_image(st->request));
    ++results;
  }
  EXPECT_EQ(results, 24);
  EXPECT_EQ(api.result_sets_written(), 24) << "a job has two result sets";
  int completed = 0;
  for (auto& w : workers) completed += w->completed;
  EXPECT_EQ(completed, 24);
  EXPECT_GT(workers[1]->completed + 0, 0);
  EXPECT_GT(workers[2]->completed + 0, 0);
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(xpending(), 0);
  EXPECT_LT(took, 15s);
}

// Redis killed (SIGKILL, AOF with fsync always) and started again mid-run: the queued jobs survive, the
// workers' and the api's clients reconnect by themselves, and every job ends once.
TEST_F(RedisQueueTest, RedisRestartMidRunLosesNothing) {
  start(/*aof=*/true);
  RedisQueue api(url_, options("api", 1000ms));
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (int i = 0; i < 2; ++i) {
    auto w = std::make_unique<FakeWorker>();
    w->url = url_;
    w->opt = options("w" + std::to_string(i), 1000ms);
    w->stop = &stop;
    workers.push_back(std::move(w));
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(api.submit(fake_request("j" + std::to_string(i), 4, 30)));
  for (auto& w : workers) w->start();
  auto succeeded = [&] {
    int n = 0;
    for (const auto& id : ids) {
      const auto st = api.status(id);
      n += st && st->status == "succeeded";
    }
    return n;
  };
  ASSERT_TRUE(wait_for([&] { return succeeded() >= 3; }, 10s));
  ASSERT_TRUE(server_->restart(/*hard=*/true));
  // Submitted while the workers are reconnecting.
  for (int i = 12; i < 16; ++i) ids.push_back(api.submit(fake_request("j" + std::to_string(i), 4, 30)));
  const bool all = wait_for([&] { return succeeded() == 16; }, 25s);
  stop = true;
  for (auto& w : workers) w->join();
  ASSERT_TRUE(all) << succeeded() << " of 16 jobs succeeded";
  EXPECT_GE(api.client().reconnects(), 1u);
  for (const auto& id : ids) {
    const auto r = api.result(id);
    ASSERT_TRUE(r) << id;
    EXPECT_EQ((*r)[0], fake_image(api.status(id)->request));
    int done = 0;
    for (const auto& e : api.events_since(id, "0", {}, 1000)) done += e.type == "done";
    EXPECT_EQ(done, 1) << id;
  }
  EXPECT_EQ(api.result_sets_written(), 16);
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(xpending(), 0);
}

// The library's worker loop (RedisWorker) with a runner that fails, fails retryably, or is cancelled.
TEST_F(RedisQueueTest, WorkerLoopEndsJobsByTheRunnersOutcome) {
  start();
  RedisQueue api(url_, options("api"));
  auto o = options("loop", 2000ms);
  o.max_attempts = 2;
  std::atomic<int> oom_runs{0};
  RedisWorker w(url_, o, [&](const RedisClaim& c, const RedisWorker::Progress& progress) {
    const auto req = nlohmann::json::parse(c.request);
    const std::string tag = req.at("tag");
    if (tag == "boom") throw std::runtime_error("bad prompt");
    if (tag == "oom") {
      ++oom_runs;
      throw RedisRetryableError("out of memory");
    }
    const int steps = req.at("steps"), step_ms = req.at("step_ms");
    for (int s = 1; s <= steps; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      if (progress(s, steps)) return RedisResult{};
    }
    return RedisResult{{fake_image(c.request)}, R"({"revised_prompt":"ok, revised"})"};
  });
  const std::string ok = api.submit(fake_request("ok")), boom = api.submit(fake_request("boom")),
                    oom = api.submit(fake_request("oom")), slow = api.submit(fake_request("slow", 200, 20));
  EXPECT_FALSE(w.busy());
  w.start();
  ASSERT_TRUE(wait_for([&] { return api.status(slow)->status == "running"; }, 10s));
  EXPECT_TRUE(wait_for([&] { return w.busy(); }, 2s));  // set right after the claim
  ASSERT_TRUE(wait_for([&] { return api.events_since(slow, "0").back().type == "progress"; }, 5s));
  EXPECT_EQ(api.cancel(slow), RedisQueue::CancelResult::Requested);
  ASSERT_TRUE(wait_for([&] { return api.status(slow)->status == "cancelled"; }, 5s)) << "cancel not seen";
  // oom's second attempt comes after slow (a retry goes to the end of the stream).
  ASSERT_TRUE(wait_for([&] { return api.status(oom)->status == "failed"; }, 5s));
  ASSERT_TRUE(wait_for([&] { return !w.busy(); }, 5s));
  w.stop();

  EXPECT_EQ(api.status(ok)->status, "succeeded");
  EXPECT_EQ((*api.result(ok))[0], "img:ok");
  // The runner's description is kept with the job and merged into its `done` event.
  EXPECT_EQ(nlohmann::json::parse(api.status(ok)->info).at("revised_prompt"), "ok, revised");
  const auto ok_events = api.events_since(ok, "0");
  ASSERT_EQ(ok_events.back().type, "done");
  const auto done = nlohmann::json::parse(ok_events.back().data);
  EXPECT_EQ(done.at("revised_prompt"), "ok, revised");
  EXPECT_EQ(done.at("images"), 1);
  EXPECT_GT(api.status(ok)->finished_ms, 0);
  EXPECT_EQ(api.status(slow)->total, 200);  // progress keeps step/total in the job's hash
  EXPECT_GE(api.status(slow)->step, 1);
  EXPECT_EQ(w.claims_first.load(), 4u);  // ok, boom, oom, slow; then oom's second run
  EXPECT_EQ(w.claims_retry.load(), 1u);
  EXPECT_EQ(w.claims_reclaimed.load(), 0u);
  EXPECT_EQ(api.status(boom)->status, "failed");
  EXPECT_EQ(api.status(boom)->error, "bad prompt");
  EXPECT_EQ(api.status(boom)->attempts, 1);
  EXPECT_EQ(api.status(oom)->status, "failed");
  EXPECT_EQ(api.status(oom)->error, "out of memory");
  EXPECT_EQ(oom_runs.load(), 2);  // max_attempts
  EXPECT_FALSE(api.result(slow));
  EXPECT_EQ(w.succeeded.load(), 1u);
  EXPECT_EQ(w.failed.load(), 2u);  // boom, and oom out of attempts
  EXPECT_EQ(w.retried.load(), 1u);
  EXPECT_EQ(w.cancelled.load(), 1u);
  std::string m;
  render_redis_metrics(m, api.depth(), &w);
  EXPECT_NE(m.find("\nernie_worker_busy{worker=\"loop\"} 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_worker_jobs_total{worker=\"loop\",outcome=\"failed\"} 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_shared_queue_length 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("\nernie_worker_claims_total{worker=\"loop\",attempt=\"retry\"} 1\n"), std::string::npos) << m;
  EXPECT_EQ(xlen(), 0);
  EXPECT_EQ(xpending(), 0);
}

// GET /v1/jobs lists jobs from {p}recent (newest first, bounded); DELETE removes an ended job only; workers
// publish their model for api nodes.
TEST_F(RedisQueueTest, RecentJobsRemoveAndTheModel) {
  start();
  auto o = options("api");
  o.max_recent = 3;
  RedisQueue api(url_, o);
  EXPECT_FALSE(api.model());
  api.publish_model(R"({"model":"tiny"})");
  EXPECT_EQ(*api.model(), R"({"model":"tiny"})");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(api.submit(fake_request("r" + std::to_string(i))));
    std::this_thread::sleep_for(3ms);  // distinct millisecond scores
  }
  EXPECT_EQ(api.recent(10), (std::vector<std::string>{ids[4], ids[3], ids[2]}));
  EXPECT_EQ(api.recent(1), (std::vector<std::string>{ids[4]}));
  EXPECT_TRUE(api.recent(0).empty());
  EXPECT_FALSE(api.remove(ids[4]));  // queued: not removed
  EXPECT_TRUE(api.status(ids[4]));
  EXPECT_EQ(api.cancel(ids[4]), RedisQueue::CancelResult::Cancelled);
  EXPECT_TRUE(api.remove(ids[4]));
  EXPECT_FALSE(api.status(ids[4]));
  EXPECT_TRUE(api.events_since(ids[4], "0").empty());
  EXPECT_EQ(api.recent(10), (std::vector<std::string>{ids[3], ids[2]}));
}

// A lost job behind many live ones in the pending list is found by one claim (XAUTOCLAIM scans a few
// entries per call: claim goes round the whole list).
TEST_F(RedisQueueTest, ClaimFindsALostJobBehindManyLiveOnes) {
  start();
  RedisQueue api(url_, options("api"));
  RedisQueue a(url_, options("a", 400ms)), b(url_, options("b", 400ms)), c(url_, options("c", 400ms));
  std::vector<RedisClaim> held;
  for (int i = 0; i < 30; ++i) api.submit(fake_request("live" + std::to_string(i)));
  const std::string lost = api.submit(fake_request("lost"));
  for (int i = 0; i < 30; ++i) {
    auto h = a.claim(1s);
    ASSERT_TRUE(h);
    held.push_back(*h);
  }
  auto dying = b.claim(1s);
  ASSERT_TRUE(dying);
  EXPECT_EQ(dying->id, lost);
  std::this_thread::sleep_for(450ms);  // every lease ran out; a is alive and refreshes its own
  for (const auto& h : held) EXPECT_TRUE(a.heartbeat(h).owned);
  auto got = c.claim(50ms);
  ASSERT_TRUE(got) << "the lost job was not found in one claim";
  EXPECT_EQ(got->id, lost);
  EXPECT_TRUE(got->reclaimed);
  EXPECT_EQ(xpending(), 31);
}

#endif  // ERNIE_HAVE_REDIS
