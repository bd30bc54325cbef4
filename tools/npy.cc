#include "tools/npy.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace gift::tools {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader assumes a little-endian host");

constexpr absl::string_view kMagic = "\x93NUMPY";

absl::Status Bad(absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// A cursor over the header dict literal.
class HeaderLexer {
 public:
  explicit HeaderLexer(absl::string_view text) : text_(text) {}

  void SkipSpaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool Consume(char c) {
    SkipSpaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(absl::string_view word) {
    SkipSpaces();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  // A Python string literal in single or double quotes, no escapes.
  std::optional<std::string> String() {
    SkipSpaces();
    if (pos_ >= text_.size()) return std::nullopt;
    const char quote = text_[pos_];
    if (quote != '\'' && quote != '"') return std::nullopt;
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return std::nullopt;
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    if (s.find('\\') != std::string::npos) return std::nullopt;
    pos_ = end + 1;
    return s;
  }
  // A non-negative decimal integer that fits int64.
  std::optional<int64_t> Int() {
    SkipSpaces();
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        return std::nullopt;
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    return v;
  }
  absl::string_view Rest() const { return text_.substr(pos_); }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

// Python tuple of ints: "()", "(3,)", "(3, 4)", "(3, 4,)".
std::optional<std::vector<int64_t>> ParseShape(HeaderLexer& lex) {
  if (!lex.Consume('(')) return std::nullopt;
  std::vector<int64_t> shape;
  if (lex.Consume(')')) return shape;
  bool trailing_comma = false;
  while (true) {
    std::optional<int64_t> v = lex.Int();
    if (!v) return std::nullopt;
    shape.push_back(*v);
    trailing_comma = lex.Consume(',');
    if (lex.Consume(')')) break;
    if (!trailing_comma) return std::nullopt;
  }
  // "(3)" is an int in Python, not a tuple.
  if (shape.size() == 1 && !trailing_comma) return std::nullopt;
  return shape;
}

// Parses the dict literal into `h`.
absl::Status ParseDict(absl::string_view text, absl::string_view name,
                       NpyHeader& h) {
  HeaderLexer lex(text);
  if (!lex.Consume('{')) return Bad(name, "header is not a dict literal");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!lex.Consume('}')) {
    std::optional<std::string> key = lex.String();
    if (!key || !lex.Consume(':')) {
      return Bad(name, "malformed header dict");
    }
    if (*key == "descr" && !have_descr) {
      std::optional<std::string> d = lex.String();
      if (!d) return Bad(name, "header 'descr' is not a string");
      h.descr = *d;
      have_descr = true;
    } else if (*key == "fortran_order" && !have_order) {
      if (lex.ConsumeWord("True")) {
        h.fortran_order = true;
      } else if (lex.ConsumeWord("False")) {
        h.fortran_order = false;
      } else {
        return Bad(name, "header 'fortran_order' is not True or False");
      }
      have_order = true;
    } else if (*key == "shape" && !have_shape) {
      std::optional<std::vector<int64_t>> s = ParseShape(lex);
      if (!s) return Bad(name, "header 'shape' is not a tuple of integers");
      h.shape = *std::move(s);
      have_shape = true;
    } else {
      return Bad(
          name, absl::StrCat("unexpected or repeated header key '", *key, "'"));
    }
    if (!lex.Consume(',')) {
      if (!lex.Consume('}')) return Bad(name, "malformed header dict");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape) {
    return Bad(name, "header lacks one of 'descr', 'fortran_order', 'shape'");
  }
  lex.SkipSpaces();
  if (lex.Rest() != "\n") {
    return Bad(name, "header is not padded with spaces and ended by '\\n'");
  }
  return absl::OkStatus();
}

uint32_t ReadLe(absl::string_view b, size_t offset, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(b[offset + i]);
  }
  return v;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "),
                      shape.size() == 1 ? ",)" : ")");
}

}  // namespace

int64_t NpyArray::size() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes,
                                         absl::string_view name) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, 6) != kMagic) {
    return Bad(name, "not a .npy file (bad magic string)");
  }
  if (bytes.size() < 8) return Bad(name, "truncated .npy header");
  NpyHeader h;
  h.major_version = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (h.major_version < 1 || h.major_version > 3 || minor != 0) {
    return Bad(name, absl::StrCat("unsupported .npy version ", h.major_version,
                                  ".", minor));
  }
  const int len_bytes = h.major_version == 1 ? 2 : 4;
  if (bytes.size() < static_cast<size_t>(8 + len_bytes)) {
    return Bad(name, "truncated .npy header");
  }
  const uint64_t header_len = ReadLe(bytes, 8, len_bytes);
  h.data_offset = static_cast<int64_t>(8 + len_bytes + header_len);
  if (static_cast<uint64_t>(bytes.size()) <
      static_cast<uint64_t>(h.data_offset)) {
    return Bad(name, absl::StrCat("truncated .npy header (declares ",
                                  header_len, " bytes, file has ",
                                  bytes.size() - 8 - len_bytes, ")"));
  }
  RETURN_IF_ERROR(ParseDict(bytes.substr(8 + len_bytes, header_len), name, h));
  return h;
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  absl::string_view name) {
  ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes, name));
  if (h.descr != "<f4") {
    return Bad(name, absl::StrCat("dtype '", h.descr,
                                  "' is not supported (only '<f4', "
                                  "little-endian float32)"));
  }
  if (h.fortran_order) {
    return Bad(name, "Fortran-order arrays are not supported (use C order)");
  }
  uint64_t count = 1;
  for (int64_t s : h.shape) {
    if (s != 0 && count > std::numeric_limits<uint64_t>::max() / 8 /
                              static_cast<uint64_t>(s)) {
      return Bad(name, "shape too large");
    }
    count *= static_cast<uint64_t>(s);
  }
  const uint64_t have = bytes.size() - static_cast<uint64_t>(h.data_offset);
  if (have != count * sizeof(float)) {
    return Bad(name,
               absl::StrCat(have < count * sizeof(float)
                                ? "truncated data: "
                                : "trailing bytes after data: ",
                            "shape ", ShapeString(h.shape), " needs ",
                            count * sizeof(float), " bytes, file has ", have));
  }
  NpyArray a;
  a.shape = h.shape;
  a.data.resize(count);
  if (count > 0) {
    std::memcpy(a.data.data(), bytes.data() + h.data_offset,
                count * sizeof(float));
  }
  return a;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path, int64_t max_bytes) {
  absl::StatusOr<std::string> bytes = ReadRegularFile(path, max_bytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open (", bytes.status().message(), ")"));
  }
  if (!bytes.ok()) return Bad(path, bytes.status().message());
  return ParseNpy(*bytes, path);
}

absl::StatusOr<std::string> SerializeNpy(const std::vector<int64_t>& shape,
                                         const std::vector<float>& data,
                                         int major_version) {
  if (major_version < 1 || major_version > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported .npy version ", major_version));
  }
  int64_t count = 1;
  for (int64_t s : shape) {
    if (s < 0) return absl::InvalidArgumentError("negative dimension");
    count *= s;
  }
  if (count != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data has ", data.size(), " elements, shape needs ", count));
  }
  std::string dict = absl::StrCat(
      "{'descr': '<f4', 'fortran_order': False, 'shape': ", ShapeString(shape),
      ", }");
  const size_t len_bytes = major_version == 1 ? 2 : 4;
  const size_t prefix = 8 + len_bytes;
  size_t header_len = dict.size() + 1;
  header_len += (64 - (prefix + header_len) % 64) % 64;
  if (major_version == 1 && header_len > 0xFFFF) {
    return absl::InvalidArgumentError("header too long for .npy version 1");
  }
  std::string out(kMagic);
  out.push_back(static_cast<char>(major_version));
  out.push_back('\0');
  for (size_t i = 0; i < len_bytes; ++i) {
    out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xFF));
  }
  out += dict;
  out.append(header_len - dict.size() - 1, ' ');
  out.push_back('\n');
  out.append(reinterpret_cast<const char*>(data.data()),
             data.size() * sizeof(float));
  return out;
}

absl::Status WriteNpy(const std::string& path,
                      const std::vector<int64_t>& shape,
                      const std::vector<float>& data, int major_version) {
  ASSIGN_OR_RETURN(std::string bytes, SerializeNpy(shape, data, major_version));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot create (", std::strerror(errno), ")"));
  }
  const size_t wrote = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (wrote != bytes.size() || !closed) {
    return absl::InternalError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace gift::tools
