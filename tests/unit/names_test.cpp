// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Every state and verdict of the engine has a name of its own (names.cpp).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "counters.h"
#include "queue_pair.h"
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

}  // namespace
}  // namespace metaroce::transport
