// The digits loader: the shipped file has 1,797 images of 64 pixels in 0..16
// and labels 0..9; plain and gzip files give the same data; malformed files are
// rejected naming the file and the line.
#define BOOST_TEST_MODULE digits
#include <boost/test/unit_test.hpp>

#include <implicit/core/digits.h>

#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include <unistd.h>
#include <string>

namespace {

const std::string kDigits = std::string(IMPLICIT_DATA_DIR) + "/digits.csv.gz";

std::string ErrorOf(const std::string& path) {
  try {
    implicit::LoadDigits(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string Row(int pixel, int label) {
  std::string r;
  for (int i = 0; i < 64; ++i) r += std::to_string(pixel) + ",";
  return r + std::to_string(label);
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& contents, bool gzip = false) {
    char name[] = "/tmp/implicit_digits_XXXXXX";
    const int fd = mkstemp(name);
    BOOST_REQUIRE(fd >= 0);
    close(fd);
    path = name;
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, contents.data(), static_cast<unsigned>(contents.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary) << contents;
    }
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(loads_the_shipped_digits) {
  const implicit::DigitsDataset d = implicit::LoadDigits(kDigits);
  BOOST_TEST(d.size() == 1797);
  BOOST_TEST(d.pixels.rows() == 64);
  BOOST_TEST(d.labels.size() == 1797u);
  BOOST_TEST(d.pixels.minCoeff() >= 0.0);
  BOOST_TEST(d.pixels.maxCoeff() <= 16.0);
  int counts[10] = {0};
  for (int l : d.labels) ++counts[l];
  for (int c : counts) BOOST_TEST(c > 150);  // every class present, roughly balanced
  const implicit::Matrix<double> x = d.Scaled();
  BOOST_TEST(x.minCoeff() >= -1.0);
  BOOST_TEST(x.maxCoeff() <= 1.0);
  BOOST_TEST(x(5, 7) == d.pixels(5, 7) / 8 - 1);
}

BOOST_AUTO_TEST_CASE(plain_and_gzip_files_agree) {
  const std::string text = Row(3, 1) + "\n" + Row(16, 9) + "\r\n\n";
  TempFile plain(text), gz(text, true);
  const auto a = implicit::LoadDigits(plain.path), b = implicit::LoadDigits(gz.path);
  BOOST_TEST(a.size() == 2);
  BOOST_TEST((a.pixels == b.pixels));
  BOOST_TEST(a.labels == b.labels);
  BOOST_TEST(a.labels[1] == 9);
  BOOST_TEST(a.pixels(63, 1) == 16.0);
}

BOOST_AUTO_TEST_CASE(malformed_files_name_the_line) {
  struct Case {
    std::string text, expect;
  };
  const std::string good = Row(1, 2) + "\n";
  const Case cases[] = {
      {good + good + Row(1, 2).substr(2) + "\n", "line 3: expected 65 columns, got 64"},
      {good + Row(1, 2) + ",5\n", "line 2: expected 65 columns, got 66"},
      {good + Row(17, 2) + "\n", "line 2: column 1: pixel value 17 outside 0..16"},
      {Row(1, 10) + "\n", "line 1: column 65: label 10 outside 0..9"},
      {good + "a," + Row(1, 2).substr(2) + "\n", "line 2: column 1: 'a' is not an integer"},
      {good + "1.5," + Row(1, 2).substr(2) + "\n", "is not an integer"},
      {good + ",," + Row(1, 2).substr(4) + "\n", "line 2: column 1: '' is not an integer"},
      {"", "contains no images"},
      {"\n\n", "contains no images"},
  };
  for (const Case& c : cases) {
    TempFile f(c.text);
    const std::string m = ErrorOf(f.path);
    BOOST_TEST_INFO(m);
    BOOST_TEST(m.find(c.expect) != std::string::npos);
    BOOST_TEST(m.find(f.path) != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(unreadable_and_corrupt_files_are_rejected) {
  BOOST_TEST(ErrorOf("/nonexistent/digits.csv.gz").find("cannot open digits file") !=
             std::string::npos);
  // A truncated gzip stream.
  std::string text;
  for (int i = 0; i < 200; ++i) text += Row(i % 17, i % 10) + "\n";
  TempFile gz(text, true);
  std::ifstream in(gz.path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TempFile cut(bytes.substr(0, bytes.size() / 2));
  const std::string m = ErrorOf(cut.path);
  BOOST_TEST_INFO(m);
  BOOST_TEST(!m.empty());
  BOOST_TEST(m.find(cut.path) != std::string::npos);
  // Binary junk that is not gzip is read as text and rejected as malformed.
  TempFile junk(std::string("\x01\x02\x03,\xff\n", 6));
  BOOST_TEST(ErrorOf(junk.path).find("line 1") != std::string::npos);
  BOOST_TEST(implicit::FindDataFile("digits.csv.gz", {"", "/nonexistent", IMPLICIT_DATA_DIR}) ==
             kDigits);
  BOOST_TEST(implicit::FindDataFile("digits.csv.gz", {"/nonexistent"}).empty());
}

BOOST_AUTO_TEST_CASE(a_huge_field_is_quoted_as_an_excerpt) {
  TempFile f(std::string(1 << 20, '7') + "x," + Row(1, 2).substr(2) + "\n");
  const std::string m = ErrorOf(f.path);
  BOOST_TEST_INFO(m.substr(0, 400));
  BOOST_TEST(m.find("line 1: column 1: '7777") != std::string::npos);
  BOOST_TEST(m.find("is not an integer") != std::string::npos);
  BOOST_TEST(m.size() < 300u + f.path.size());
}
