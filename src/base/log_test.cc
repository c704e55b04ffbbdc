#include "base/log.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace weft::log {
namespace {

// A strict logfmt reader: key=value pairs separated by one space, values bare
// (no space, '=', '"' or '\') or double-quoted with \" \\ \n \r \t \xNN
// escapes. Returns false on anything else, so a test fails on an invalid line.
bool ParseLogfmt(const std::string& line, std::multimap<std::string, std::string>* out) {
  size_t i = 0;
  while (i < line.size()) {
    size_t eq = line.find('=', i);
    if (eq == std::string::npos || eq == i) return false;
    std::string key = line.substr(i, eq - i);
    for (char c : key)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
    i = eq + 1;
    std::string value;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value += c;
          continue;
        }
        if (i >= line.size()) return false;
        char e = line[i++];
        switch (e) {
          case '"': value += '"'; break;
          case '\\': value += '\\'; break;
          case 'n': value += '\n'; break;
          case 'r': value += '\r'; break;
          case 't': value += '\t'; break;
          case 'x':
            if (i + 2 > line.size()) return false;
            value += static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16));
            i += 2;
            break;
          default: return false;
        }
      }
      if (!closed) return false;
    } else {
      while (i < line.size() && line[i] != ' ') {
        char c = line[i++];
        if (c == '=' || c == '"' || c == '\\') return false;
        value += c;
      }
      if (value.empty()) return false;
    }
    out->emplace(key, value);
    if (i == line.size()) break;
    if (line[i] != ' ') return false;
    ++i;
  }
  return true;
}

TEST(LogTest, FieldsAreRenderedOnceAndParseBack) {
  const std::string hostile = "a \"quoted\" back\\slash\nnew=line\ttab\x01";
  std::string line = FormatLine(Level::kWarn, "watch failed; reconnecting",
                                {{"what", "nodes"}, {"items", 42}, {"ok", true}, {"empty", ""},
                                 {"err", Status::Error(Reason::kFailed, Domain::kFile,
                                                       "GET /api: timed out")}, {"text", hostile}});
  std::multimap<std::string, std::string> kv;
  ASSERT_TRUE(ParseLogfmt(line, &kv)) << line;
  EXPECT_EQ(kv.count("msg"), 1u);
  EXPECT_EQ(kv.find("msg")->second, "watch failed; reconnecting");
  EXPECT_EQ(kv.find("level")->second, "warn");
  EXPECT_EQ(kv.find("what")->second, "nodes");
  EXPECT_EQ(kv.find("items")->second, "42");
  EXPECT_EQ(kv.find("ok")->second, "true");
  EXPECT_EQ(kv.find("empty")->second, "");
  EXPECT_NE(kv.find("err")->second.find("GET /api: timed out"), std::string::npos);
  EXPECT_EQ(kv.find("text")->second, hostile);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per record";
  EXPECT_NE(line.find(" what=nodes "), std::string::npos) << "plain values stay bare: " << line;
}

TEST(LogTest, ContextFieldsComeBeforeTheMessage) {
  SetContext({{"cmd", "ADD"}, {"cid", "c 1"}});
  std::string line = FormatLine(Level::kInfo, "attached", {{"ip", "10.0.0.5"}});
  SetContext({});
  std::multimap<std::string, std::string> kv;
  ASSERT_TRUE(ParseLogfmt(line, &kv)) << line;
  EXPECT_EQ(kv.find("cmd")->second, "ADD");
  EXPECT_EQ(kv.find("cid")->second, "c 1");
  EXPECT_LT(line.find("cid="), line.find("msg="));
  EXPECT_LT(line.find("msg="), line.find("ip="));
}

TEST(LogTest, RunTimeFieldsAndNumbers) {
  std::vector<Field> fields{Field::Dynamic("ipam_ms", "0.83"), Field("ratio", 0.5)};
  std::string out;
  AppendFields(&out, fields);
  EXPECT_EQ(out, " ipam_ms=0.83 ratio=0.5");
}

TEST(LogTest, ValuesAreQuotedOnlyWhenNeeded) {
  auto render = [](std::string_view v) {
    std::string s;
    AppendValue(&s, v);
    return s;
  };
  EXPECT_EQ(render("10.0.0.0/24"), "10.0.0.0/24");
  EXPECT_EQ(render(""), "\"\"");
  EXPECT_EQ(render("a b"), "\"a b\"");
  EXPECT_EQ(render("k=v"), "\"k=v\"");
  EXPECT_EQ(render("say \"hi\""), "\"say \\\"hi\\\"\"");
}

TEST(LogTest, LinesGoToTheSinkHandedIn) {
  std::vector<std::string> lines;
  SetLevel(Level::kInfo);
  SetSink([&](std::string_view line) { lines.emplace_back(line); });
  WEFT_LOG(kInfo, "to the sink", {"n", 1});
  WEFT_LOG(kDebug, "below the level");
  SetSink({});  // stderr again; the lambda is gone before `lines`
  SetLevel(Level::kWarn);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].back(), '\n');
  EXPECT_NE(lines[0].find(" msg=\"to the sink\" n=1\n"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace weft::log
