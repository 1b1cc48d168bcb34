// Slurm hostlist expressions (see hostlist.hpp).
#include "pipewright/graph/hostlist.hpp"

#include <charconv>
#include <cstddef>
#include <string>
#include <vector>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph {

namespace {

constexpr std::size_t kMaxHosts = 1u << 20;

// The items of a comma-separated list whose commas inside brackets do not split.
std::vector<std::string> split_top_level(const std::string& expr, const std::string& what) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char ch : expr) {
    if (ch == '[') {
      PW_CHECK(depth == 0, ConfigError, what << "='" << expr << "': nested '[' in a hostlist");
      ++depth;
    } else if (ch == ']') {
      PW_CHECK(depth == 1, ConfigError, what << "='" << expr << "': ']' without '['");
      --depth;
    } else if (ch == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
      continue;
    }
    cur += ch;
  }
  PW_CHECK(depth == 0, ConfigError, what << "='" << expr << "': '[' without ']'");
  items.push_back(cur);
  return items;
}

unsigned long parse_number(const std::string& text, const std::string& expr,
                           const std::string& what) {
  unsigned long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  PW_CHECK(!text.empty() && ec == std::errc() && ptr == end, ConfigError,
           what << "='" << expr << "': '" << text << "' in a bracket is not a number or a range");
  return value;
}

// "01-03,7" -> {"01", "02", "03", "7"}.
std::vector<std::string> expand_bracket(const std::string& body, const std::string& expr,
                                        const std::string& what) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = body.find(',', start);
    const std::string part = body.substr(start, comma == std::string::npos ? comma : comma - start);
    const std::size_t dash = part.find('-');
    if (dash == std::string::npos) {
      parse_number(part, expr, what);
      out.push_back(part);
    } else {
      const std::string lo_text = part.substr(0, dash);
      const unsigned long lo = parse_number(lo_text, expr, what);
      const unsigned long hi = parse_number(part.substr(dash + 1), expr, what);
      PW_CHECK(lo <= hi, ConfigError,
               what << "='" << expr << "': range '" << part << "' decreases");
      PW_CHECK(hi - lo < kMaxHosts && out.size() + (hi - lo) < kMaxHosts, ConfigError,
               what << "='" << expr << "': more than " << kMaxHosts << " hosts");
      for (unsigned long v = lo; v <= hi; ++v) {
        std::string s = std::to_string(v);
        if (s.size() < lo_text.size()) s.insert(0, lo_text.size() - s.size(), '0');
        out.push_back(s);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expr, const std::string& what) {
  PW_CHECK(!expr.empty(), ConfigError, what << " is empty (no hosts)");
  std::vector<std::string> hosts;
  for (const std::string& item : split_top_level(expr, what)) {
    PW_CHECK(!item.empty(), ConfigError, what << "='" << expr << "': an empty host name");
    std::vector<std::string> names{""};
    std::size_t pos = 0;
    while (pos < item.size()) {
      const std::size_t open = item.find('[', pos);
      const std::string text = item.substr(pos, open == std::string::npos ? open : open - pos);
      for (auto& n : names) n += text;
      if (open == std::string::npos) break;
      const std::size_t close = item.find(']', open);  // balanced: checked by split_top_level
      const auto values = expand_bracket(item.substr(open + 1, close - open - 1), expr, what);
      PW_CHECK(names.size() * values.size() + hosts.size() <= kMaxHosts, ConfigError,
               what << "='" << expr << "': more than " << kMaxHosts << " hosts");
      std::vector<std::string> next;
      next.reserve(names.size() * values.size());
      for (const auto& n : names) {
        for (const auto& v : values) next.push_back(n + v);
      }
      names = std::move(next);
      pos = close + 1;
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::vector<int> expand_task_counts(const std::string& text, const std::string& what) {
  PW_CHECK(!text.empty(), ConfigError, what << " is empty");
  std::vector<int> counts;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? comma : comma - start);
    std::string count = part;
    unsigned long repeat = 1;
    const std::size_t paren = part.find("(x");
    if (paren != std::string::npos) {
      PW_CHECK(part.back() == ')', ConfigError,
               what << "='" << text << "': '" << part << "' is not N or N(xM)");
      count = part.substr(0, paren);
      repeat = parse_number(part.substr(paren + 2, part.size() - paren - 3), text, what);
    }
    const unsigned long n = parse_number(count, text, what);
    PW_CHECK(n >= 1 && n <= 1u << 20 && repeat >= 1 && counts.size() + repeat <= kMaxHosts,
             ConfigError, what << "='" << text << "': '" << part << "' is out of range");
    counts.insert(counts.end(), repeat, static_cast<int>(n));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace pipewright::graph
