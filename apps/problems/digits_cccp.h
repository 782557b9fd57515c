// The shape the Hopfield-type problems share: the first N digits stored in
// an energy built from W = scale x digits, queries with pixels 32..63 zeroed,
// the CCCP map of the energy, and a floor of the two GEMMs W^T Z and W P.
#pragma once

#include "problems/problem.h"

#include <implicit/core/energy_maps.h>

#include <string>
#include <utility>

namespace implicit_apps {

template <typename S, typename Energy>
class DigitsCccpProblemT : public ProblemT<S> {
 public:
  const implicit::FixedPointMap<S>& map() const override { return map_; }
  FloorTiming MeasureFloor(int repeats) const override {
    return HopfieldTypeFloor<S>(W_, this->initial_, weights_name_, floor_note_, repeats);
  }

 protected:
  // `energy_args` follow W in the energy's constructor; `weights_name` and
  // `floor_note` describe the floor.
  template <typename... EnergyArgs>
  DigitsCccpProblemT(const implicit::DigitsDataset& digits, int patterns, double scale, std::string weights_name,
                     std::string floor_note, EnergyArgs&&... energy_args)
      : data_(MakeDigitPatterns(digits, patterns)),
        W_((data_.patterns * scale).template cast<S>()),
        energy_(W_, std::forward<EnergyArgs>(energy_args)...),
        map_(energy_),
        weights_name_(std::move(weights_name)),
        floor_note_(std::move(floor_note)) {
    this->initial_ = data_.queries.template cast<S>();
  }
  // The number of stored digits, and the weights W the energy stores.
  Index stored() const { return data_.patterns.cols(); }
  const Matrix<S>& weights() const { return W_; }

 private:
  DigitPatterns data_;
  Matrix<S> W_;
  Energy energy_;
  implicit::CccpMap<S> map_;
  std::string weights_name_, floor_note_;
};

}  // namespace implicit_apps
