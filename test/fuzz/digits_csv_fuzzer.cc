// libFuzzer harness: the digits CSV parser (lib/src/digits.cc).
// Any text must either be rejected with std::runtime_error or give a data set
// that keeps the format's promises: 64 pixel rows, one label per image,
// pixels in 0..16, labels in 0..9.
#include "fuzz_check.h"

#include <implicit/core/digits.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using implicit_fuzz::Check;
  const std::string text(reinterpret_cast<const char*>(data), size);
  implicit::DigitsDataset digits;
  try {
    digits = implicit::ParseDigitsCsv(text, "fuzz-input");
  } catch (const std::runtime_error&) {
    return 0;  // rejected: the documented outcome for malformed text
  }
  Check(digits.pixels.rows() == implicit::DigitsDataset::kPixels, "64 pixel rows");
  Check(static_cast<std::size_t>(digits.size()) == digits.labels.size(), "one label per image");
  Check(digits.pixels.size() == 0 ||
            (digits.pixels.minCoeff() >= 0 &&
             digits.pixels.maxCoeff() <= implicit::DigitsDataset::kMaxPixel),
        "pixels in 0..16");
  for (int label : digits.labels) Check(label >= 0 && label <= 9, "labels in 0..9");
  return 0;
}
