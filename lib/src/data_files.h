// Internal to the data loaders (implicit::data): reading a gzip or plain text
// file whole, walking its lines, splitting and converting CSV fields, and
// quoting input in error messages without copying a huge line into them.
//
//   const std::string text = data_files::ReadCompressedOrPlain(path, "graph nodes file");
//   data_files::ForEachLine(text, [&](int line_number, const std::string& line) { ... });
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace implicit {
namespace data_files {

// The whole (decompressed) contents of `path`, gzip or plain. Throws
// std::runtime_error "cannot open/read <kind> '<path>': <reason>" on a
// missing, unreadable or corrupt file.
std::string ReadCompressedOrPlain(const std::string& path, const std::string& kind);

// Calls visit(line_number, line) for every line of `text` that is not blank,
// with a trailing '\r' removed; line numbers count from 1 and include blank lines.
void ForEachLine(const std::string& text,
                 const std::function<void(int line_number, const std::string& line)>& visit);

// The comma-separated fields of `line` (an empty line gives one empty field).
std::vector<std::string> SplitFields(const std::string& line);

// `text` quoted for an error message: at most `max_chars` characters, then "...".
std::string Excerpt(const std::string& text, std::size_t max_chars = 40);

// Parses a whole field (surrounding blanks allowed) as a decimal integer /
// a finite real number; false when it is not one (or out of range).
bool ParseInteger(const std::string& field, long* value);
bool ParseFiniteReal(const std::string& field, double* value);

}  // namespace data_files
}  // namespace implicit
