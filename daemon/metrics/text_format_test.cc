#include "daemon/metrics/text_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

namespace gift::metrics {
namespace {

TEST(TextFormatTest, FormatsIntegersWithoutExponent) {
  EXPECT_EQ(FormatValue(0.0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(3.0), "3");
  EXPECT_EQ(FormatValue(-7.0), "-7");
  EXPECT_EQ(FormatValue(1e6), "1000000");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatValue(1e20), "100000000000000000000");
  EXPECT_EQ(FormatValue(uint64_t{18446744073709551615u}),
            "18446744073709551615");
}

TEST(TextFormatTest, FormatsFractionsShortest) {
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1.5), "1.5");
  EXPECT_EQ(FormatValue(-0.25), "-0.25");
  EXPECT_EQ(FormatValue(0.0005), "0.0005");
  EXPECT_EQ(FormatValue(1e-6), "0.000001");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatValue(1234567.5), "1234567.5");
  EXPECT_EQ(FormatValue(1e-7), "1e-07");
  EXPECT_EQ(FormatValue(-1e-9), "-1e-09");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(FormatValue(5e-324), "5e-324");
}

TEST(TextFormatTest, FormatsNonFinite) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(TextFormatTest, ValuesRoundTrip) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> wide(-1000, 1000);  // exponent form
  std::uniform_int_distribution<int> narrow(-30, 75);    // positional form
  for (int i = 0; i < 20000; ++i) {
    double v = std::ldexp(mantissa(rng), i % 2 ? wide(rng) : narrow(rng));
    std::string s = FormatValue(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
}

TEST(TextFormatTest, Escapes) {
  EXPECT_EQ(EscapeHelp("a\\b\nc\"d"), "a\\\\b\\nc\"d");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
}

TEST(TextFormatTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("gift_steps_total"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidLabelName("job_id"));
  EXPECT_TRUE(IsValidLabelName("_x"));
  EXPECT_FALSE(IsValidLabelName(""));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9a"));
}

TEST(TextFormatTest, AppendsSamples) {
  std::string out;
  AppendHeader(&out, "m", "Help.", "gauge");
  AppendSample(&out, "m", {}, {}, "1");
  AppendSample(&out, "m", {"a", "b"}, {"x", "y\""}, "2");
  AppendSample(&out, "m_bucket", {}, {}, "3", "+Inf");
  AppendSample(&out, "m_bucket", {"a"}, {"x"}, "4", "0.5");
  EXPECT_EQ(out,
            "# HELP m Help.\n"
            "# TYPE m gauge\n"
            "m 1\n"
            "m{a=\"x\",b=\"y\\\"\"} 2\n"
            "m_bucket{le=\"+Inf\"} 3\n"
            "m_bucket{a=\"x\",le=\"0.5\"} 4\n");
}

}  // namespace
}  // namespace gift::metrics
