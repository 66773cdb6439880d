// server/redis_url.h: the `serve --queue` address, parsed and checked.
#include <gtest/gtest.h>

#include "server/redis_url.h"

using namespace ernie::server;

TEST(RedisUrl, Accepts) {
  struct Case {
    const char* in;
    const char* host;
    int port, db;
  } cases[] = {
      {"redis://127.0.0.1:6379", "127.0.0.1", 6379, 0},
      {"redis://localhost", "localhost", 6379, 0},
      {"redis://redis-0.redis.svc.cluster.local:7000/3", "redis-0.redis.svc.cluster.local", 7000, 3},
      {"redis://h/15", "h", 6379, 15},
      {"redis://[::1]:6380/1", "::1", 6380, 1},
      {"redis://[::1]", "::1", 6379, 0},
      {"redis://my_redis:1/65535", "my_redis", 1, 65535},
      {"redis://h:65535", "h", 65535, 0},
  };
  for (const auto& c : cases) {
    std::string err;
    const auto u = parse_redis_url(c.in, &err);
    ASSERT_TRUE(u) << c.in << ": " << err;
    EXPECT_EQ(u->host, c.host) << c.in;
    EXPECT_EQ(u->port, c.port) << c.in;
    EXPECT_EQ(u->db, c.db) << c.in;
    const auto again = parse_redis_url(format_redis_url(*u));  // the canonical text parses back
    ASSERT_TRUE(again) << format_redis_url(*u);
    EXPECT_EQ(*again, *u);
  }
  EXPECT_EQ(format_redis_url({"::1", 7000, 2}), "redis://[::1]:7000/2");
  EXPECT_EQ(format_redis_url({"h", 6379, 0}), "redis://h:6379/0");
}

TEST(RedisUrl, RejectsWithAReason) {
  struct Case {
    const char* in;
    const char* says;
  } cases[] = {
      {"", "expected redis://"},
      {"http://h:1", "expected redis://"},
      {"REDIS://h", "expected redis://"},
      {"redis:/h", "expected redis://"},
      {"rediss://h:6379", "TLS"},
      {"redis://", "host is empty"},
      {"redis://:6379", "host is empty"},
      {"redis://user:pw@h:6379", "password"},
      {"redis://h:6379?db=1", "query"},
      {"redis://h#x", "query"},
      {"redis://h:0", "port"},
      {"redis://h:65536", "port"},
      {"redis://h:", "port"},
      {"redis://h:+1", "port"},
      {"redis://h:-1", "port"},
      {"redis://h:12x", "port"},
      {"redis://h:1234567", "port"},
      {"redis://h:1:2", "port"},
      {"redis://h/", "database"},
      {"redis://h/x", "database"},
      {"redis://h/65536", "database"},
      {"redis://h/1/2", "database"},
      {"redis://h o", "host may hold only"},
      {"redis://h\n:1", "host may hold only"},
      {"redis://[::1", "closing ']'"},
      {"redis://[]:1", "IPv6"},
      {"redis://[zz::1]", "IPv6"},
      {"redis://[::1]x", "':PORT'"},
      {"redis://[::1]:0", "port"},
  };
  for (const auto& c : cases) {
    std::string err;
    EXPECT_FALSE(parse_redis_url(c.in, &err)) << c.in;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.in << " -> " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << "the message stays on one line";
  }
  EXPECT_FALSE(parse_redis_url("redis://" + std::string(254, 'a')));
}
