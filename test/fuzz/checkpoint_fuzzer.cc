// libFuzzer harness: the checkpoint reader (Checkpoint::Deserialize,
// lib/src/checkpoint.cc). Any bytes must either be rejected with
// std::runtime_error or give a checkpoint whose tensors hold rows x cols
// values and which survives a write/read round trip unchanged.
#include "fuzz_check.h"

#include <implicit/core/checkpoint.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using implicit_fuzz::Check;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  implicit::Checkpoint checkpoint;
  try {
    checkpoint = implicit::Checkpoint::Deserialize(bytes, "fuzz-input");
  } catch (const std::runtime_error&) {
    return 0;  // rejected: the documented outcome for a damaged file
  }
  for (const auto& set : checkpoint.parameter_sets())
    for (const implicit::CheckpointTensor& t : set.second)
      Check(t.rows >= 0 && t.cols >= 0 && t.values.size() == t.rows * t.cols,
            "a tensor holds rows x cols values");
  const std::string written = checkpoint.Serialize();
  const implicit::Checkpoint again = implicit::Checkpoint::Deserialize(written, "round-trip");
  Check(again.Serialize() == written, "write/read round trip is exact");
  return 0;
}
