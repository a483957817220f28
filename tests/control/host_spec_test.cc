#include "control/host_spec.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

#include <string>
#include <vector>

namespace hvd::control {
namespace {

using Hosts = std::vector<HostSlots>;

Hosts List(const std::string& text) {
  Hosts out;
  Status s = ParseHostList(text, &out);
  EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
  return out;
}

// The error message for `text`, which must fail; "" (and a test failure) when it parses.
std::string ListError(const std::string& text) {
  Hosts out = {{"untouched", 7}};
  Status s = ParseHostList(text, &out);
  EXPECT_FALSE(s.ok()) << "'" << text << "' parsed";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, (Hosts{{"untouched", 7}})) << "output changed on error for '" << text << "'";
  return s.message();
}

Hosts File(const std::string& content) {
  Hosts out;
  Status s = ParseHostfile(content, "hosts.txt", &out);
  EXPECT_TRUE(s.ok()) << content << ": " << s.ToString();
  return out;
}

std::string FileError(const std::string& content) {
  Hosts out = {{"untouched", 7}};
  Status s = ParseHostfile(content, "/etc/hvd/hosts", &out);
  EXPECT_FALSE(s.ok()) << "'" << content << "' parsed";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, (Hosts{{"untouched", 7}}));
  return s.message();
}

TEST(ParseHostList, HostsWithSlots) {
  EXPECT_EQ(List("a:4,b:4"), (Hosts{{"a", 4}, {"b", 4}}));
  EXPECT_EQ(List("node-1.example.com:8"), (Hosts{{"node-1.example.com", 8}}));
  EXPECT_EQ(List("10.0.0.1:2,10.0.0.2:3"), (Hosts{{"10.0.0.1", 2}, {"10.0.0.2", 3}}));
  EXPECT_EQ(List("gpu_box:1048576"), (Hosts{{"gpu_box", kMaxSlotsPerHost}}));
}

TEST(ParseHostList, SlotsDefaultToOne) {
  EXPECT_EQ(List("a"), (Hosts{{"a", 1}}));
  EXPECT_EQ(List("a,b:3,c"), (Hosts{{"a", 1}, {"b", 3}, {"c", 1}}));
  EXPECT_EQ(List("localhost"), (Hosts{{"localhost", 1}}));
}

TEST(ParseHostList, KeepsOrderAndSpelling) {
  EXPECT_EQ(List("zeta:1,Alpha:2,mid:3"), (Hosts{{"zeta", 1}, {"Alpha", 2}, {"mid", 3}}));
}

TEST(ParseHostList, SpacesAroundEntriesAreIgnored) {
  EXPECT_EQ(List(" a:2 , b : 3 "), (Hosts{{"a", 2}, {"b", 3}}));
  EXPECT_EQ(List("a:2,\tb"), (Hosts{{"a", 2}, {"b", 1}}));
}

TEST(ParseHostList, LeadingZerosAreFine) {
  EXPECT_EQ(List("a:04"), (Hosts{{"a", 4}}));
}

TEST(ParseHostList, EmptyInputNamesTheForm) {
  EXPECT_HAS(ListError(""), "empty host list");
  EXPECT_HAS(ListError("   "), "HOST[:SLOTS]");
}

TEST(ParseHostList, EmptyEntries) {
  for (const char* text : {"a:1,", ",a:1", "a:1,,b:1", ","}) {
    std::string m = ListError(text);
    EXPECT_HAS(m, "empty entry");
    EXPECT_HAS(m, text);
    EXPECT_HAS(m, "HOST[:SLOTS]");
  }
}

TEST(ParseHostList, EmptyHost) {
  EXPECT_HAS(ListError(":4"), "empty host name");
  EXPECT_HAS(ListError("a:1, :2"), "empty host name");
}

TEST(ParseHostList, ZeroSlots) {
  std::string m = ListError("a:4,b:0");
  EXPECT_HAS(m, "slots of host 'b'");
  EXPECT_HAS(m, "at least 1");
  EXPECT_HAS(m, "'0'");
  EXPECT_HAS(ListError("a:000"), "at least 1");
}

TEST(ParseHostList, NegativeSlots) {
  std::string m = ListError("a:-2");
  EXPECT_HAS(m, "slots of host 'a'");
  EXPECT_HAS(m, "positive integer");
  EXPECT_HAS(m, "'-2'");
  EXPECT_HAS(ListError("a:+2"), "'+2'");
}

TEST(ParseHostList, GarbageSlots) {
  EXPECT_HAS(ListError("a:four"), "'four'");
  EXPECT_HAS(ListError("a:4x"), "'4x'");
  EXPECT_HAS(ListError("a:4.5"), "'4.5'");
  EXPECT_HAS(ListError("a:0x10"), "'0x10'");
  EXPECT_HAS(ListError("a:4 4"), "'4 4'");
  EXPECT_HAS(ListError("a:"), "empty");
}

TEST(ParseHostList, TooManySlots) {
  EXPECT_HAS(ListError("a:1048577"), "maximum");
  EXPECT_HAS(ListError("a:99999999999999999999999"), "maximum");
}

TEST(ParseHostList, MoreThanOneColon) {
  EXPECT_HAS(ListError("a:1:2"), "more than one ':'");
  // IPv6 literals are not accepted: ':' is the slots separator.
  EXPECT_HAS(ListError("::1:2"), "empty host name");
}

TEST(ParseHostList, BadCharactersInHost) {
  EXPECT_HAS(ListError("a b:2"), "contains ' '");
  EXPECT_HAS(ListError("a=b"), "contains '='");
  EXPECT_HAS(ListError("a/b:2"), "contains '/'");
  EXPECT_HAS(ListError("a;b"), "letters, digits");
}

TEST(ParseHostList, HostCannotLookLikeAFlag) {
  // `hvdrun -H -np 4 ...` must not take "-np" as a host.
  EXPECT_HAS(ListError("-np"), "cannot start with '-'");
  EXPECT_HAS(ListError(".hidden"), "cannot start with '.'");
}

TEST(ParseHostList, Duplicates) {
  std::string m = ListError("a:2,b:2,a:2");
  EXPECT_HAS(m, "host 'a' is listed twice");
  EXPECT_HAS(m, "once");
  EXPECT_HAS(ListError("a,a"), "listed twice");
  EXPECT_HAS(ListError("Node1:1,node1:1"), "listed twice");
}

TEST(ParseHostList, RoundTripsThroughFormat) {
  for (const char* text : {"a:4,b:4", "x:1", "h1:3,h2:1,h3:7"}) {
    EXPECT_EQ(FormatHostList(List(text)), text);
  }
  EXPECT_EQ(FormatHostList(List("a,b:2")), "a:1,b:2");
  EXPECT_EQ(FormatHostList({}), "");
}

TEST(TotalSlots, Sums) {
  EXPECT_EQ(TotalSlots({}), 0);
  EXPECT_EQ(TotalSlots(List("a:4,b:4,c")), 9);
}

TEST(TotalSlots, SaturatesInsteadOfOverflowing) {
  Hosts many;
  for (int i = 0; i < 4096; ++i) {
    std::string host = "h";
    host += std::to_string(i);
    many.push_back({host, kMaxSlotsPerHost});
  }
  EXPECT_EQ(TotalSlots(many), INT32_MAX);
}

TEST(ParseHostfile, MpirunForm) {
  EXPECT_EQ(File("a slots=4\nb slots=2\n"), (Hosts{{"a", 4}, {"b", 2}}));
}

TEST(ParseHostfile, BareHostMeansOneSlot) {
  EXPECT_EQ(File("a\nb slots=3\nc"), (Hosts{{"a", 1}, {"b", 3}, {"c", 1}}));
}

TEST(ParseHostfile, CommentsBlankLinesAndWhitespace) {
  const char* content =
      "# the training pool\n"
      "\n"
      "   \n"
      "  a   slots=4   # 4 GPUs\n"
      "\tb\tslots=2\n"
      "#c slots=9\n"
      "d#no space before the comment\n";
  EXPECT_EQ(File(content), (Hosts{{"a", 4}, {"b", 2}, {"d", 1}}));
}

TEST(ParseHostfile, WindowsLineEndings) {
  EXPECT_EQ(File("a slots=2\r\nb slots=1\r\n"), (Hosts{{"a", 2}, {"b", 1}}));
}

TEST(ParseHostfile, NoTrailingNewline) {
  EXPECT_EQ(File("a slots=2"), (Hosts{{"a", 2}}));
}

TEST(ParseHostfile, EmptyFileIsAnError) {
  EXPECT_HAS(FileError(""), "lists no hosts");
  std::string m = FileError("# only comments\n\n");
  EXPECT_HAS(m, "/etc/hvd/hosts");
  EXPECT_HAS(m, "HOST slots=N");
}

TEST(ParseHostfile, ErrorsNameFileLineNumberAndText) {
  std::string m = FileError("a slots=4\n# comment\n\nb slots=zero\n");
  EXPECT_HAS(m, "hostfile /etc/hvd/hosts line 4 'b slots=zero'");
  EXPECT_HAS(m, "positive integer");
  EXPECT_HAS(m, "'zero'");
  EXPECT_HAS(m, "HOST slots=N");
}

TEST(ParseHostfile, BadSlots) {
  EXPECT_HAS(FileError("a slots=0"), "at least 1");
  EXPECT_HAS(FileError("a slots=-1"), "'-1'");
  EXPECT_HAS(FileError("a slots="), "empty");
  EXPECT_HAS(FileError("a slots=2x"), "'2x'");
  EXPECT_HAS(FileError("a slots=99999999"), "maximum");
}

// Open MPI's hostfile syntax, which horovodrun's and mpirun's users have: max_slots (the
// oversubscription limit; hvd never places more than slots) and Open MPI's other spellings.
TEST(ParseHostfile, OpenMpiFields) {
  EXPECT_EQ(File("a slots=4 max_slots=8\nb max_slots=2 slots=2\n"), (Hosts{{"a", 4}, {"b", 2}}));
  EXPECT_EQ(File("a slot=2\nb count=3\nc max-slots=5 slots=1\n"),
            (Hosts{{"a", 2}, {"b", 3}, {"c", 1}}));
  // Without slots a host has one (or --slots-per-host), whatever its max_slots.
  EXPECT_EQ(File("a max_slots=4\n"), (Hosts{{"a", 1}}));
  EXPECT_HAS(FileError("a slots=4 max_slots=2"), "max_slots=2 is below slots=4");
  EXPECT_HAS(FileError("a max_slots=0"), "at least 1");
  EXPECT_HAS(FileError("a slots=2 max_slots=x"), "'x'");
  EXPECT_HAS(FileError("a slots=2 slot=3"), "'slot' is given twice");
}

TEST(ParseHostfile, DefaultSlotsForHostsWithoutACount) {
  Hosts out;
  ASSERT_TRUE(ParseHostfile("a\nb slots=3\n", "h", &out, 4).ok());
  EXPECT_EQ(out, (Hosts{{"a", 4}, {"b", 3}}));
  ASSERT_TRUE(ParseHostList("a,b:3", &out, 2).ok());
  EXPECT_EQ(out, (Hosts{{"a", 2}, {"b", 3}}));
  // A default above the line's max_slots (--slots-per-host 2 on 'localhost max_slots=1') is
  // capped at it, as Open MPI caps its default; it is no contradiction the line made.
  ASSERT_TRUE(ParseHostfile("localhost max_slots=1\nb max_slots=8\n", "h", &out, 2).ok());
  EXPECT_EQ(out, (Hosts{{"localhost", 1}, {"b", 2}}));
}

// A file saved with a byte order mark (Windows editors) reads as without it.
TEST(ParseHostfile, LeadingByteOrderMark) {
  EXPECT_EQ(File("\xEF\xBB\xBF"
                 "a slots=2\nb\n"),
            (Hosts{{"a", 2}, {"b", 1}}));
}

TEST(ParseHostfile, UnknownOrExtraFields) {
  EXPECT_HAS(FileError("a rank=4"), "unknown field 'rank=4'");
  EXPECT_HAS(FileError("a 4"), "unknown field '4'");
  EXPECT_HAS(FileError("a slots = 4"), "without spaces around '='");
  EXPECT_HAS(FileError("a slots=2 slots=3"), "'slots' is given twice");
  // The -H form does not belong in a hostfile.
  EXPECT_HAS(FileError("a:4"), "contains ':'");
}

TEST(ParseHostfile, Duplicates) {
  std::string m = FileError("a slots=2\nb slots=2\nA slots=1\n");
  EXPECT_HAS(m, "line 3 'A slots=1'");
  EXPECT_HAS(m, "listed twice");
}

TEST(ParseHostfile, LineNumbersCountBlankAndCrLfLines) {
  EXPECT_HAS(FileError("a\r\n\r\n# x\r\nb slots=-\r\n"), "line 4 'b slots=-'");
}

TEST(ParseHostfile, BadHostNames) {
  EXPECT_HAS(FileError("-H slots=2"), "line 1");
  EXPECT_HAS(FileError("a,b slots=2"), "contains ','");
}

TEST(CheckAddress, TakesNamesAndIpv4AddressesAndRefusesBadDottedNumbers) {
  for (const char* ok : {"127.0.0.1", "10.0.0.255", "node-a", "node1.cluster.local", "a1.2"}) {
    EXPECT_TRUE(CheckAddress(ok).ok()) << ok << ": " << CheckAddress(ok).message();
  }
  for (const char* bad : {"127.0.0.300", "8.8.8.8.8", "1.2.3", "10..0.1"}) {
    Status s = CheckAddress(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("is no IPv4 address"), std::string::npos) << s.message();
  }
  EXPECT_NE(CheckAddress("not an address").message().find("contains ' '"), std::string::npos);
  EXPECT_FALSE(CheckAddress("").ok());
}

}  // namespace
}  // namespace hvd::control
