// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Every state and verdict of the engine has a name of its own (names.cpp),
// and so has every counter of the engine and of the runtime, with a unit and
// a meaning (counters.h, runtime_stats.h): dumps put both lists in one object.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "counters.h"
#include "queue_pair.h"
#include "runtime_stats.h"
#include "types.h"

namespace metaroce::transport {
namespace {

// The names of every value from the first enumerator to `last`.
template <typename Enum>
void expect_distinct_names(Enum last) {
  std::set<std::string> names;
  for (unsigned v = 0; v <= static_cast<unsigned>(last); ++v) {
    const std::string name = to_string(static_cast<Enum>(v));
    EXPECT_NE(name, "?") << "value " << v << " has no name";
    EXPECT_TRUE(names.insert(name).second) << "value " << v << " shares the name " << name;
  }
}

TEST(Names, EveryQpStateHasItsOwn) { expect_distinct_names(QpState::Error); }
TEST(Names, EveryVerdictHasItsOwn) { expect_distinct_names(Verdict::StaleResponse); }
TEST(Names, EveryPathHealthHasItsOwn) { expect_distinct_names(PathHealth::Failed); }

TEST(Names, AreTheOnesDumpsPrint) {
  EXPECT_STREQ(to_string(QpState::ReadyToSend), "rts");
  EXPECT_STREQ(to_string(Verdict::ReceiverNotReady), "receiver-not-ready");
  EXPECT_STREQ(to_string(PathHealth::Suspect), "suspect");
}

bool snake_case(const std::string& name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name.front())) || name.back() == '_') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (!std::islower(c) && !std::isdigit(c) && !(c == '_' && name[i - 1] != '_')) return false;
  }
  return true;
}

template <class Counters, size_t N>
void expect_described(const CounterInfo<Counters> (&table)[N], std::set<std::string>& names) {
  for (const CounterInfo<Counters>& c : table) {
    EXPECT_TRUE(snake_case(c.name)) << c.name;
    EXPECT_TRUE(names.insert(c.name).second) << c.name << " is listed twice";
    EXPECT_NE(std::string(c.unit), "") << c.name << " has no unit";
    EXPECT_NE(std::string(c.meaning), "") << c.name << " has no meaning";
  }
}

TEST(Names, EveryCounterHasItsOwnSnakeCaseNameAUnitAndAMeaning) {
  std::set<std::string> names;
  expect_described(kEndpointCounterInfo, names);
  EXPECT_EQ(names.size() * sizeof(uint64_t), sizeof(EndpointCounters));
  expect_described(io::kRuntimeCounterInfo, names);
}

}  // namespace
}  // namespace metaroce::transport
