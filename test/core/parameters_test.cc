#define BOOST_TEST_MODULE parameters
#include <boost/test/unit_test.hpp>

#include <implicit/core/parameters.h>

using namespace implicit;

BOOST_AUTO_TEST_CASE(blocks_are_views_into_one_flat_vector) {
  ParameterSet<double> p;
  BOOST_TEST(p.Add("W", 2, 3) == 0);
  BOOST_TEST(p.Add("b", 2, 1) == 6);
  BOOST_TEST(p.size() == 8);
  p.Block("W")(1, 2) = 5.0;   // column-major: offset 1 + 2*2 = 5
  p.Block("b")(1, 0) = 7.0;
  BOOST_TEST(p.values()(5) == 5.0);
  BOOST_TEST(p.values()(7) == 7.0);
  Vector<double> grad = Vector<double>::Zero(p.size());
  p.BlockOf(grad, "b").setConstant(2.0);
  BOOST_TEST(grad.sum() == 4.0);
  BOOST_TEST(p.GetEntry("b").offset == 6);
}

BOOST_AUTO_TEST_CASE(bad_names_and_shapes_are_rejected) {
  ParameterSet<float> p;
  p.Add("W", 2, 2);
  BOOST_CHECK_THROW(p.Add("W", 1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(p.Add("", 1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(p.Add("neg", -1, 1), std::invalid_argument);
  BOOST_CHECK_THROW(p.Block("missing"), std::invalid_argument);
  Vector<float> wrong(3);
  BOOST_CHECK_THROW(p.BlockOf(wrong, "W"), std::invalid_argument);
}
