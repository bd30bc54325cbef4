// The selection policy's schema (selection_policy_schema.h) against the
// README's option table: every field's row, default and range, and every
// kind's spelling, so that the documentation cannot drift from the code.
// The whole table is also checked against giftd's generated one
// (config_test's ReadmeListsEveryOptionAsGenerated).
#include "daemon/selection_policy_schema.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gift::daemon {
namespace {

// The README's rows for selection.*: key (without "selection.") -> cells
// (flag, default, meaning), with the backquotes and '\|' escapes removed.
std::map<std::string, std::vector<std::string>> ReadmeSelectionRows() {
  std::ifstream in(GIFT_SOURCE_DIR "/README.md");
  EXPECT_TRUE(in.good()) << "cannot read " GIFT_SOURCE_DIR "/README.md";
  std::map<std::string, std::vector<std::string>> rows;
  const std::string prefix = "| `selection.";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cell += '|';
        ++i;
      } else if (line[i] == '|') {
        while (!cell.empty() && cell.back() == ' ') cell.pop_back();
        while (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
        if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') {
          cell = cell.substr(1, cell.size() - 2);
        }
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    EXPECT_EQ(cells.size(), 4u) << line;
    if (cells.size() != 4) continue;
    const std::string key = cells[0].substr(std::string("selection.").size());
    EXPECT_EQ(rows.count(key), 0u) << "two rows for selection." << key;
    rows[key] = {cells[1], cells[2], cells[3]};
  }
  return rows;
}

// The default as giftd prints it: integers plain, doubles shortest.
std::string DefaultText(const PolicyField& f) {
  if (f.type == PolicyField::Type::kInt) {
    return std::to_string(static_cast<long long>(f.default_value));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f.default_value);
  return std::string(buf, end);
}

std::string FlagText(const std::string& name) {
  std::string flag = "--selection." + name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

TEST(SelectionPolicySchemaTest, ReadmeTableListsEveryFieldDefaultAndRange) {
  const auto rows = ReadmeSelectionRows();
  std::set<std::string> documented;
  for (const auto& [key, cells] : rows) documented.insert(key);
  std::set<std::string> known = {"kind"};
  for (const PolicyField& f : kPolicyFields) {
    known.insert(f.name);
    auto it = rows.find(f.name);
    if (it == rows.end()) {
      ADD_FAILURE() << "README.md's option table lacks selection." << f.name;
      continue;
    }
    const std::vector<std::string>& cells = it->second;
    const char* value = f.type == PolicyField::Type::kInt ? "INT" : "FLOAT";
    EXPECT_EQ(cells[0], FlagText(f.name) + "=" + value) << f.name;
    EXPECT_EQ(cells[1], DefaultText(f)) << f.name;
    EXPECT_NE(cells[2].find(PolicyRangeText(f)), std::string::npos)
        << f.name << ": the meaning lacks the range " << PolicyRangeText(f)
        << ": " << cells[2];
    EXPECT_EQ(cells[2], PolicyHelp(f)) << f.name;
  }
  EXPECT_EQ(documented, known) << "README.md's selection.* rows and the "
                                  "schema's fields differ";
}

TEST(SelectionPolicySchemaTest, ReadmeTableListsEveryKind) {
  const auto rows = ReadmeSelectionRows();
  auto it = rows.find("kind");
  ASSERT_NE(it, rows.end()) << "README.md lacks selection.kind";
  EXPECT_EQ(it->second[0], "--selection.kind=" + SelectionKindList("|", "|"));
  std::string default_name;
  for (const SelectionKindSpelling& k : kSelectionKinds) {
    if (k.kind == kDefaultSelectionKind) default_name = k.name;
  }
  EXPECT_EQ(it->second[1], default_name);
  EXPECT_EQ(it->second[2], kSelectionKindDoc);
}

TEST(SelectionPolicySchemaTest, KindNamesAreDistinctAndFound) {
  EXPECT_EQ(SelectionKindList("|", "|"), "top-k|elbow|threshold");
  EXPECT_EQ(SelectionKindList(", ", " or "), "top-k, elbow or threshold");
  for (const SelectionKindSpelling& k : kSelectionKinds) {
    const SelectionKindSpelling* found = FindSelectionKind(k.name);
    ASSERT_NE(found, nullptr) << k.name;
    EXPECT_EQ(found->kind, k.kind);
  }
  EXPECT_EQ(FindSelectionKind("topk"), nullptr);
  EXPECT_EQ(FindSelectionKind(""), nullptr);
}

TEST(SelectionPolicySchemaTest, DefaultsLieInTheirRangesAndIntsAreWhole) {
  std::set<std::string> names, flags;
  for (const PolicyField& f : kPolicyFields) {
    EXPECT_TRUE(f.Contains(f.default_value)) << f.name;
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag;
    if (f.type == PolicyField::Type::kInt) {
      EXPECT_EQ(f.default_value, std::floor(f.default_value)) << f.name;
      EXPECT_TRUE(f.HasMax()) << f.name;  // an int needs a bound
    }
  }
}

TEST(SelectionPolicySchemaTest, RangesReadAsTheTextsSayThem) {
  EXPECT_EQ(PolicyRangeText(policy_field::kTopK), "[1, 1000000]");
  EXPECT_EQ(PolicyRangeText(policy_field::kHysteresis), "[0, 1)");
  EXPECT_EQ(PolicyRangeText(policy_field::kMaxExtraFlops), ">= 0");
  EXPECT_EQ(PolicyHelp(policy_field::kMinGain), "Measured-gain guard, [0, 1)");
  const PolicyField& h = policy_field::kHysteresis;
  EXPECT_TRUE(h.Contains(0));
  EXPECT_FALSE(h.Contains(1));
  EXPECT_FALSE(h.Contains(-0.1));
  EXPECT_FALSE(h.Contains(NAN));
  const PolicyField& flops = policy_field::kMaxExtraFlops;
  EXPECT_TRUE(flops.Contains(1e30));
  EXPECT_FALSE(flops.Contains(INFINITY));
  EXPECT_TRUE(policy_field::kTopK.Contains(kMaxSelectionCount));
  EXPECT_FALSE(policy_field::kTopK.Contains(kMaxSelectionCount + 1));
}

}  // namespace
}  // namespace gift::daemon
