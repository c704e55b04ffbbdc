// weft_build_info as Prometheus reads it.
#include "agent/metrics.h"

#include <gtest/gtest.h>

namespace weft::agent {
namespace {

TEST(BuildInfoMetric, NamesVersionAndCommit) {
  EXPECT_EQ(RenderBuildInfo("0.2.0", "3a51fbe1c2d4"),
            "# HELP weft_build_info The release and commit weftd was built from (always 1).\n"
            "# TYPE weft_build_info gauge\n"
            "weft_build_info{version=\"0.2.0\",commit=\"3a51fbe1c2d4\"} 1\n");
}

TEST(BuildInfoMetric, EmptyIsUnknownAndLabelsAreEscaped) {
  std::string text = RenderBuildInfo("", "a\"b\\c\nd");
  EXPECT_NE(text.find("weft_build_info{version=\"unknown\",commit=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace weft::agent
