// server/http_head.h: the framing rules the connection guard applies before the HTTP library sees a request.
#include <gtest/gtest.h>

#include "server/http_head.h"

using namespace ernie::server;
using namespace std::string_literals;

namespace {

HeadCheck check(const std::string& s, size_t max_body = 1 << 20) {
  HeadLimits l;
  l.max_body_bytes = max_body;
  return check_request_head(s, l);
}

TEST(HttpHead, ReadyWithLengthAndHeadSize) {
  const std::string head = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n";
  const HeadCheck c = check(head + "hello");
  ASSERT_EQ(c.kind, HeadCheck::Ready) << c.reason;
  EXPECT_EQ(c.head_bytes, head.size());
  EXPECT_EQ(c.content_length, 5u);
  EXPECT_FALSE(c.chunked);
  EXPECT_EQ(check("GET / HTTP/1.0\r\n\r\n").kind, HeadCheck::Ready);  // 1.0 needs no Host
  EXPECT_EQ(check("GET / HTTP/1.1\nHost: x\n\n").kind, HeadCheck::Ready);  // bare LF line ends
  EXPECT_EQ(check("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n").content_length, 5u);
}

TEST(HttpHead, NeedsMoreUntilTheBlankLine) {
  EXPECT_EQ(check("GET / HTTP/1.1\r\nHost: x\r\n").kind, HeadCheck::NeedMore);
  EXPECT_EQ(check("GET / HT").kind, HeadCheck::NeedMore);
  EXPECT_EQ(check("").kind, HeadCheck::NeedMore);
}

TEST(HttpHead, RejectsWithTheRightStatus) {
  struct Case {
    std::string in;
    int status;
  } cases[] = {
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\0\r\n\r\n"s, 400},
      {"GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {"GET / FOO\r\nHost: x\r\n\r\n", 400},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414},
      {"GET / HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n", 417},
  };
  for (const Case& k : cases) {
    const HeadCheck c = check(k.in);
    EXPECT_EQ(c.kind, HeadCheck::Reject) << k.in;
    EXPECT_EQ(c.status, k.status) << k.in << " -> " << c.reason;
  }
}

TEST(HttpHead, LimitsOnSizeAndFieldCount) {
  std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(check(many + "\r\n").status, 431);
  EXPECT_EQ(check(many).status, 431);  // before the head is complete
  const std::string big = "GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(20000, 'a');
  EXPECT_EQ(check(big).status, 431);  // no line end yet, already over the limit
}

TEST(HttpHead, ExpectContinueOnlyWithABody) {
  EXPECT_TRUE(check("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n").expect_continue);
  EXPECT_FALSE(check("GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n").expect_continue);
}

TEST(HttpHead, ChunkedBodies) {
  std::string body;
  ChunkedCheck k = decode_chunked("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT", 100, body);
  ASSERT_EQ(k.kind, ChunkedCheck::Ready) << k.reason;
  EXPECT_EQ(body, "hello world");
  EXPECT_EQ(k.consumed, std::string("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n").size());
  EXPECT_EQ(decode_chunked("5\r\nhel", 100, body).kind, ChunkedCheck::NeedMore);
  EXPECT_EQ(decode_chunked("5\r\nhello\r\n0\r\n", 100, body).kind, ChunkedCheck::NeedMore);  // no trailer end
  EXPECT_EQ(decode_chunked("zz\r\n", 100, body).status, 400);
  EXPECT_EQ(decode_chunked("5\r\nhelloXX\r\n0\r\n\r\n", 100, body).status, 400);
  EXPECT_EQ(decode_chunked("65\r\n", 100, body).status, 413);  // 101 bytes over a 100-byte limit
  EXPECT_EQ(decode_chunked("ffffffffffffffffff\r\n", 100, body).status, 400);
}

TEST(HttpHead, NormalizedRequestDropsFramingAndSetsTheLength) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
                           "X-A: b\r\n\r\n";
  const std::string out = normalized_request(head, "hello world");
  EXPECT_EQ(out, "POST /x HTTP/1.1\r\nHost: h\r\nX-A: b\r\nContent-Length: 11\r\n\r\nhello world");
}

}  // namespace

namespace {
TEST(HttpHead, KeepsTheTargetAndAuthorizationForTheKeyCheck) {
  const HeadCheck c = check("POST /v1/jobs?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(c.kind, HeadCheck::Ready) << c.reason;
  EXPECT_EQ(c.target, "/v1/jobs?x=1");
  EXPECT_EQ(c.authorization_fields, 1);
  EXPECT_EQ(c.authorization, "Bearer k1");
  EXPECT_EQ(check("GET / HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n").authorization_fields, 2);
}

TEST(HttpHead, BearerMatchesOnlyTheOneKey) {
  EXPECT_TRUE(bearer_matches(0, "", ""));  // no key configured
  EXPECT_TRUE(bearer_matches(1, "Bearer sekrit", "sekrit"));
  EXPECT_TRUE(bearer_matches(1, "bEaReR  sekrit", "sekrit"));
  EXPECT_FALSE(bearer_matches(0, "", "sekrit"));
  EXPECT_FALSE(bearer_matches(2, "Bearer sekrit", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Bearer sekrit2", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Bearer sekri", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Basic sekrit", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Bearer\tsekrit", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Bearer ", "sekrit"));
  EXPECT_FALSE(bearer_matches(1, "Bearersekrit", "sekrit"));
}
}  // namespace
