// A minimal PNG writer (8-bit grayscale, zlib).
#pragma once

#include "common/output_files.h"

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace implicit_apps {

// Writes an 8-bit grayscale PNG (row-major, width*height bytes).
inline void WriteGrayPng(const std::string& path, int width, int height,
                         const std::vector<unsigned char>& pixels) {
  if (width <= 0 || height <= 0 || pixels.size() != static_cast<std::size_t>(width) * height)
    throw std::invalid_argument("WriteGrayPng: pixel buffer does not match the size");
  std::string raw;
  raw.reserve(static_cast<std::size_t>(height) * (width + 1));
  for (int r = 0; r < height; ++r) {
    raw.push_back('\0');  // filter type 0
    raw.append(reinterpret_cast<const char*>(pixels.data()) + static_cast<std::size_t>(r) * width,
               static_cast<std::size_t>(width));
  }
  uLongf compressed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(compressed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(&compressed[0]), &compressed_size,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw std::runtime_error("cannot compress PNG data for '" + path + "'");
  compressed.resize(compressed_size);
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  std::string png("\x89PNG\r\n\x1a\n", 8);
  auto chunk = [&](const char* type, const std::string& data) {
    be32(png, static_cast<std::uint32_t>(data.size()));
    std::string body = std::string(type, 4) + data;
    png += body;
    be32(png, static_cast<std::uint32_t>(
                  crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
  };
  std::string ihdr;
  be32(ihdr, static_cast<std::uint32_t>(width));
  be32(ihdr, static_cast<std::uint32_t>(height));
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit, grayscale, deflate, no filter, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", compressed);
  chunk("IEND", "");
  WriteTextFile(path, png, "PNG image");
}

}  // namespace implicit_apps
