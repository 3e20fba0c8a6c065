// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <gtest/gtest.h>

#include "metaroce/ctl.h"

namespace metaroce::ctl {
namespace {

std::optional<Message> parse(const std::string& text, std::string& error) {
  return decode(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()), error);
}

// The error decoding `text` gives; the test fails if it decodes.
std::string refusal(const std::string& text) {
  std::string error;
  EXPECT_FALSE(parse(text, error)) << text;
  EXPECT_FALSE(error.empty());
  return error;
}

TEST(Ctl, RoundTripsEveryRequest) {
  for (Type t : {Type::Status, Type::Stats, Type::Reload, Type::Ok}) {
    std::string error;
    auto m = parse(encode(make(t)), error);
    ASSERT_TRUE(m) << error;
    EXPECT_EQ(m->type, t);
  }
  nlohmann::json lease = make(Type::Lease);
  lease["pid"] = 42;
  lease["address"] = "10.0.0.1";
  lease["paths"] = 4;
  lease["device"] = "mr0";
  std::string error;
  auto m = parse(encode(lease), error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->type, Type::Lease);
  EXPECT_EQ(m->body["paths"], 4);
  EXPECT_EQ(m->body["device"], "mr0");

  nlohmann::json ports = make(Type::PeerPorts);
  ports["home_port"] = 4800;
  ports["dest"] = "10.0.0.2";
  ports["dport"] = 4792;
  ports["paths"] = 4;
  m = parse(encode(ports), error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->type, Type::PeerPorts);

  nlohmann::json answer = make(Type::PeerPortsOk);
  answer["dest"] = "10.0.0.2";
  answer["spread"] = "hash";
  answer["source_ports"] = nlohmann::json::array();  // none: discovery found no paths
  m = parse(encode(answer), error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->type, Type::PeerPortsOk);
}

TEST(Ctl, ALeaseOkTakesProgressThreadsFrom1To16) {
  for (int n : {1, 16}) {
    std::string error;
    auto m = parse(
        R"({"v":1,"type":"lease_ok","home_port":4792,"stats_interval_ms":0,"block_first":20000,"block_size":64,"source_ports":[20000],"policy":{},"progress_threads":)" +
            std::to_string(n) + "}",
        error);
    ASSERT_TRUE(m) << error;
    EXPECT_EQ(m->body["progress_threads"], n);
  }
}

TEST(Ctl, RefusesMalformedMessages) {
  EXPECT_EQ(refusal(""), "empty message");
  EXPECT_EQ(refusal(std::string(kMaxMessageBytes + 1, ' ')), "message too long");
  EXPECT_EQ(refusal("{not json"), "not valid JSON");
  EXPECT_EQ(refusal("[1,2]"), "message is not a JSON object");
  EXPECT_EQ(refusal(R"({"type":"status"})"), "missing version 'v'");
  EXPECT_NE(refusal(R"({"v":2,"type":"status"})").find("unsupported protocol version 2"), std::string::npos);
  EXPECT_EQ(refusal(R"({"v":1})"), "missing 'type'");
  EXPECT_EQ(refusal(R"({"v":1,"type":"launch"})"), "unknown message type 'launch'");
}

TEST(Ctl, RefusesBadFields) {
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","address":"a","paths":4})").find("missing field 'pid'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","pid":-3,"address":"a","paths":4})").find("'pid'"), std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","pid":1,"address":"a","paths":65})").find("out of range"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","pid":1,"address":"a","paths":0})").find("out of range"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","pid":1,"address":7,"paths":4})").find("string"), std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"peer_ports","home_port":4800,"dest":"a","paths":4,"dport":70000})").find("dport"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"peer_ports","home_port":4800,"dest":"a"})").find("missing field 'paths'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"peer_ports_ok","dest":"a","spread":"x","source_ports":[1,0]})").find("bad port"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"paths","dest":"x","refresh":"yes"})").find("refresh"), std::string::npos);
  EXPECT_NE(
      refusal(R"({"v":1,"type":"report","home_port":4792,"counters":{"a":"b"},"connections":[]})").find("counter"),
      std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"policy","class":"x","policy":{"ecn_gain":3}})").find("ecn_gain"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"v":1,"type":"policy","class":"x","policy":{"min_window_bytes":9,"max_window_bytes":8}})")
                .find("exceeds"),
            std::string::npos);
  EXPECT_NE(
      refusal(
          R"({"v":1,"type":"lease_ok","home_port":4792,"stats_interval_ms":0,"block_first":20000,"block_size":64,"source_ports":[],"policy":{}})")
          .find("source_ports"),
      std::string::npos);
  EXPECT_NE(
      refusal(
          R"({"v":1,"type":"lease_ok","home_port":4792,"stats_interval_ms":0,"block_first":20000,"block_size":64,"source_ports":[20000],"policy":{},"busy_poll_us":1000001})")
          .find("busy_poll_us"),
      std::string::npos);
  // A lease_ok whose field `name` holds `value` (JSON) is refused, naming it.
  auto refuses_field = [&](const std::string& name, const std::string& value) {
    EXPECT_NE(
        refusal(
            R"({"v":1,"type":"lease_ok","home_port":4792,"stats_interval_ms":0,"block_first":20000,"block_size":64,"source_ports":[20000],"policy":{},")" +
            name + "\":" + value + "}")
            .find(name),
        std::string::npos)
        << name << " = " << value;
  };
  for (const char* n : {"0", "17", "-1", "\"4\""}) refuses_field("progress_threads", n);
  for (const char* planes : {R"([])", R"(["eth0",""])", R"(["0123456789abcdef"])", R"("eth0")",
                             R"(["a","b","c","d","e","f","g","h","i"])", R"([7])"})
    refuses_field("planes", planes);
  EXPECT_NE(refusal(R"({"v":1,"type":"lease","pid":1,"address":"a","device":7})").find("device"), std::string::npos);
}

TEST(Ctl, PolicyRoundTripsAndAppliesOnlyItsFields) {
  Policy p;
  p.ecn_gain = 0.25;
  p.target_delay_ns = 123000;
  p.max_window_bytes = 65536;
  p.rate_hint_utilization = 0.5;
  Policy back;
  std::string error;
  ASSERT_TRUE(policy_from_json(policy_to_json(p), back, error)) << error;
  EXPECT_EQ(back, p);

  struct Cc {
    double ecn_gain = 1;
    uint32_t additive_increase_bytes = 7;
    uint64_t target_queue_delay_ns = 9;
    double delay_backoff = 0.8;
    uint32_t min_window_bytes = 1;
    uint32_t max_window_bytes = 2;
    uint32_t initial_window_bytes = 3;
  } cc;
  apply_policy(p, cc);
  EXPECT_EQ(cc.ecn_gain, 0.25);
  EXPECT_EQ(cc.target_queue_delay_ns, 123000u);
  EXPECT_EQ(cc.max_window_bytes, 65536u);
  EXPECT_EQ(cc.additive_increase_bytes, 7u);  // not in the policy: untouched
  EXPECT_EQ(cc.min_window_bytes, 1u);
}

TEST(Ctl, IgnoresUnknownFieldsForForwardCompatibility) {
  std::string error;
  auto m = parse(R"({"v":1,"type":"status","future":{"x":1}})", error);
  ASSERT_TRUE(m) << error;
  EXPECT_EQ(m->type, Type::Status);
}

}  // namespace
}  // namespace metaroce::ctl
