// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "spec_markers.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace metaroce::compliance {
namespace {

struct Block {
  size_t first_line = 0;
  std::string text;
  std::vector<size_t> line_starts;  // offset in text of each source line
};

bool starts_block(const std::string& line) {
  static const std::regex item(R"(^\s*([*-]|[0-9]+\.)\s)");
  return line.starts_with("|") || line.starts_with("#") || std::regex_search(line, item);
}

std::vector<Block> blocks_of(const std::string& text) {
  std::vector<Block> blocks;
  std::istringstream in(text);
  std::string line;
  size_t number = 0;
  bool fenced = false;
  bool open = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.starts_with("```")) {
      fenced = !fenced;
      open = false;
      continue;
    }
    const bool blank = line.find_first_not_of(" \t") == std::string::npos;
    if (fenced || blank) {
      open = false;
      continue;
    }
    if (!open || starts_block(line) || blocks.back().text.starts_with("|")) {
      blocks.push_back({number, {}, {}});
      open = true;
    }
    Block& b = blocks.back();
    b.line_starts.push_back(b.text.size());
    b.text += line;
    b.text += ' ';
  }
  return blocks;
}

size_t line_at(const Block& b, size_t offset) {
  const auto it = std::upper_bound(b.line_starts.begin(), b.line_starts.end(), offset);
  return b.first_line + static_cast<size_t>(it - b.line_starts.begin()) - 1;
}

std::string excerpt(const std::string& text, size_t at) {
  const size_t from = at > 50 ? at - 50 : 0;
  std::string out = text.substr(from, 110);
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

}  // namespace

SpecMarkers read_spec_markers(const std::string& text) {
  static const std::regex token(R"(\bMUST\b|\[(C-[0-9][0-9.]*[a-z]?(?:,\s*C-[0-9][0-9.]*[a-z]?)*)\])");
  static const std::regex id(R"(C-[0-9][0-9.]*[a-z]?)");
  SpecMarkers out;
  for (const Block& b : blocks_of(text)) {
    if (b.text.find("RFC 2119") != std::string::npos) continue;  // the definition of the key words
    std::optional<MustStatement> open;
    auto close_open = [&](const char* why) {
      if (!open) return;
      out.problems.push_back("docs/spec.md:" + std::to_string(open->line) + ": a MUST without a case marker " + why +
                             ": \"" + open->excerpt + "\"");
      open.reset();
    };
    for (auto it = std::sregex_iterator(b.text.begin(), b.text.end(), token); it != std::sregex_iterator(); ++it) {
      const std::smatch& m = *it;
      const size_t at = static_cast<size_t>(m.position(0));
      if (m[1].matched) {
        if (!open) {
          out.problems.push_back("docs/spec.md:" + std::to_string(line_at(b, at)) + ": case marker " + m.str(0) +
                                 " follows no MUST");
          continue;
        }
        const std::string list = m[1].str();
        for (auto c = std::sregex_iterator(list.begin(), list.end(), id); c != std::sregex_iterator(); ++c)
          open->cases.push_back(c->str());
        out.musts.push_back(std::move(*open));
        open.reset();
      } else {
        close_open("before the next MUST");
        open = MustStatement{line_at(b, at), excerpt(b.text, at), {}};
      }
    }
    close_open("in its paragraph");
  }
  return out;
}

std::vector<std::string> coverage_problems(const SpecMarkers& markers, const std::vector<std::string>& case_ids) {
  std::vector<std::string> problems = markers.problems;
  const std::set<std::string> known(case_ids.begin(), case_ids.end());
  std::set<std::string> named;
  for (const MustStatement& must : markers.musts) {
    for (const std::string& c : must.cases) {
      named.insert(c);
      if (!known.count(c))
        problems.push_back("docs/spec.md:" + std::to_string(must.line) + ": marker names " + c +
                           ", which is not a case of the suite");
    }
  }
  for (const std::string& c : case_ids)
    if (!named.count(c)) problems.push_back("case " + c + " checks no MUST of docs/spec.md (no marker names it)");
  return problems;
}

}  // namespace metaroce::compliance
