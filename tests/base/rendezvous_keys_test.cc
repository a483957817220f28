// base/rendezvous_keys.h: the keys the runtime writes are the keys the launcher parses, and a key
// that is not a rank key is refused with what is wrong with it.
#include "base/rendezvous_keys.h"

#include <gtest/gtest.h>

namespace hvd::base {
namespace {

std::string Refused(std::string_view key) {
  RankKeyParts parts;
  Status s = ParseRankKey(key, &parts);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
  return s.message();
}

TEST(RendezvousKeysTest, BuildersSpellTheScheme) {
  EXPECT_EQ(JobPrefix("ab12"), "job/ab12/");
  EXPECT_EQ(AttemptScope("ab12", 3), "job/ab12/attempt/3");
  EXPECT_EQ(AttemptPrefix("ab12", 0), "job/ab12/attempt/0/");
  EXPECT_EQ(IncarnationScope(AttemptScope("ab12", 1), 2), "job/ab12/attempt/1/init/2");
  EXPECT_EQ(RankKey(RankKeyKind::kHost, 7), "host/7");
  EXPECT_EQ(RankKey(RankKeyKind::kStall, 0), "stall/0");
  EXPECT_EQ(RankKey(RankKeyKind::kAbort, 12), "abort/12");
  EXPECT_EQ(RankKey(RankKeyKind::kAbsent, 3), "absent/3");
  EXPECT_EQ(RankKey(RankKeyKind::kCommitted, 5), "committed/5");
}

TEST(RendezvousKeysTest, WhatTheRuntimeWritesTheLauncherParses) {
  for (RankKeyKind kind : {RankKeyKind::kHost, RankKeyKind::kStall, RankKeyKind::kAbort,
                           RankKeyKind::kAbsent, RankKeyKind::kCommitted}) {
    const std::string key = AttemptScope("j-1", 4) + "/" + RankKey(kind, 9);
    RankKeyParts parts;
    ASSERT_TRUE(ParseRankKey(key, &parts).ok()) << key;
    EXPECT_EQ(parts.job_id, "j-1");
    EXPECT_EQ(parts.attempt, 4);
    EXPECT_EQ(parts.kind, kind);
    EXPECT_EQ(parts.rank, 9);
  }
}

// A later elastic meeting's host keys name the generation and the index in its member list; the
// first generation's first meeting is the attempt's own host keys (ParseRankKey's).
TEST(RendezvousKeysTest, ElasticMeetingHostKeysParse) {
  const std::string scope = AttemptScope("j-1", 2);
  EXPECT_EQ(ElasticMeetingScope(scope, 0, 0), scope);
  ElasticMeetingKeyParts m;
  for (auto [g, session] : {std::pair<int64_t, int>{0, 1}, {5, 0}, {12, 3}}) {
    const std::string key =
        ElasticMeetingScope(scope, g, session) + "/" + RankKey(RankKeyKind::kHost, 4);
    ASSERT_TRUE(ParseElasticMeetingKey(key, &m)) << key;
    EXPECT_EQ(m.job_id, "j-1");
    EXPECT_EQ(m.attempt, 2);
    EXPECT_EQ(m.generation, g);
    EXPECT_EQ(m.index, 4);
  }
  EXPECT_EQ(ElasticMeetingScope(scope, 5, 0), "job/j-1/attempt/2/elastic/5/init/0");
  for (const char* other :
       {"job/j-1/attempt/2/host/4", "job/j-1/attempt/2/elastic/5/init/0/tcp/4",
        "job/j-1/attempt/2/elastic/5/init/0/host/x", "job/j-1/attempt/2/elastic/-5/init/0/host/1",
        "job/j-1/attempt/2/elastic/5/init/0/host/1/more", "job/j-1/attempt/2/elastic/latest",
        "job//attempt/2/elastic/5/init/0/host/1", "job/j-1/attempt/2/elastic/gen/5"}) {
    EXPECT_FALSE(ParseElasticMeetingKey(other, &m)) << other;
  }
}

TEST(RendezvousKeysTest, OtherKeysAreRefusedNamingWhatIsWrong) {
  EXPECT_EQ(Refused("host/3"), "rendezvous key 'host/3' is not under job/<id>/attempt/<n>/");
  EXPECT_EQ(Refused("job//attempt/0/host/1"),
            "rendezvous key 'job//attempt/0/host/1' is not under job/<id>/attempt/<n>/");
  EXPECT_EQ(Refused("job/a/attempt/x/host/1"),
            "rendezvous key 'job/a/attempt/x/host/1': the attempt 'x' is not a decimal number");
  EXPECT_EQ(Refused("job/a/attempt/-1/host/1"),
            "rendezvous key 'job/a/attempt/-1/host/1': the attempt '-1' is not a decimal number");
  EXPECT_EQ(Refused("job/a/attempt/0/tcp/1"),
            "rendezvous key 'job/a/attempt/0/tcp/1': 'tcp' is not a rank key's kind (host, stall, "
            "abort, absent or committed)");
  EXPECT_EQ(Refused("job/a/attempt/0/host/+1"),
            "rendezvous key 'job/a/attempt/0/host/+1': the rank '+1' is not a decimal number");
  EXPECT_EQ(Refused("job/a/attempt/0/host/99999999999"),
            "rendezvous key 'job/a/attempt/0/host/99999999999': the rank '99999999999' is not a "
            "decimal number");
  // A re-Init's keys (init/<k>/...) are not the first meeting: not a rank key.
  EXPECT_EQ(Refused("job/a/attempt/0/init/1/host/2"),
            "rendezvous key 'job/a/attempt/0/init/1/host/2' is not "
            "job/<id>/attempt/<n>/<kind>/<rank>");
  EXPECT_EQ(Refused("job/a/attempt/0/host"),
            "rendezvous key 'job/a/attempt/0/host' is not job/<id>/attempt/<n>/<kind>/<rank>");
}

TEST(RendezvousKeysTest, AnAbsenceReadsBackAndGarbageIsRefused) {
  ElasticAbsence a{4, {2, 5}, 60000};
  EXPECT_EQ(FormatElasticAbsence(a), "4 2,5 60000");
  ElasticAbsence b;
  ASSERT_TRUE(ParseElasticAbsence("4 2,5 60000", &b).ok());
  EXPECT_EQ(b.generation, 4);
  EXPECT_EQ(b.workers, (std::vector<int>{2, 5}));
  EXPECT_EQ(b.waited_ms, 60000);
  for (const char* bad : {"", "4", "4 2,5", "x 2 1", "4 2 x", "4  1", "-1 2 1", "4 2,,5 1"}) {
    ElasticAbsence c;
    Status s = ParseElasticAbsence(bad, &c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  ElasticAbsence d;
  EXPECT_EQ(ParseElasticAbsence("4 2,5", &d).message(),
            "elastic absence \"4 2,5\" is not \"<generation> <worker ids> <milliseconds>\" (a "
            "runtime of another version?)");
}

TEST(RendezvousKeysTest, JobPrefixOfAKey) {
  EXPECT_EQ(JobPrefixOf("job/ab/attempt/0/host/1"), "job/ab/");
  EXPECT_EQ(JobPrefixOf("job/ab/"), "job/ab/");
  EXPECT_EQ(JobPrefixOf("job/ab"), "");
  EXPECT_EQ(JobPrefixOf("other/key"), "");
  EXPECT_EQ(JobPrefixOf(""), "");
}

}  // namespace
}  // namespace hvd::base
