// A text table for the terminal (aligned columns) and as CSV.
#pragma once

#include <algorithm>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace implicit_apps {

// A text table: columns left-aligned (text) or right-aligned (numbers).
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_aligned = {})
      : header_(std::move(header)), right_(std::move(right_aligned)) {
    right_.resize(header_.size(), false);
  }
  void AddRow(std::vector<std::string> row) {
    row.resize(header_.size());
    rows_.push_back(std::move(row));
  }
  void Print(std::ostream& out) const {
    std::vector<std::size_t> w(header_.size());
    for (std::size_t c = 0; c < w.size(); ++c) {
      w[c] = header_[c].size();
      for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& r) {
      std::string s;
      for (std::size_t c = 0; c < w.size(); ++c) {
        const std::string pad(w[c] - r[c].size(), ' ');
        s += (c ? "  " : "") + (right_[c] ? pad + r[c] : r[c] + pad);
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out << s << "\n";
    };
    line(header_);
    std::size_t total = 0;
    for (std::size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
    out << std::string(total, '-') << "\n";
    for (const auto& r : rows_) line(r);
  }
  // CSV with a header row (fields quoted when needed).
  std::string Csv() const {
    auto field = [](const std::string& f) {
      if (f.find_first_of(",\"\n") == std::string::npos) return f;
      std::string q = "\"";
      for (char c : f) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      return q + "\"";
    };
    std::string s;
    auto line = [&](const std::vector<std::string>& r) {
      for (std::size_t c = 0; c < r.size(); ++c) s += (c ? "," : "") + field(r[c]);
      s += "\n";
    };
    line(header_);
    for (const auto& r : rows_) line(r);
    return s;
  }

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace implicit_apps
