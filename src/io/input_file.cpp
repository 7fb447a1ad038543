// The one reader of user-given files (io/input_file.h).
#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace seqpar {

namespace {

std::string errno_text() { return std::strerror(errno); }

// What a non-regular file is, for the message.
const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string mib(uint64_t bytes) { return fmt::format("{} MiB", bytes >> 20); }

void check_stat(const std::string& path, const InputKind& kind, const struct stat& st) {
  SEQPAR_INPUT_CHECK(S_ISREG(st.st_mode), "{}: the {} must be a regular file, but this is {}", path, kind.name,
                     file_type_name(st.st_mode));
  SEQPAR_INPUT_CHECK(static_cast<uint64_t>(st.st_size) <= kind.max_bytes,
                     "{}: the {} is {} bytes, more than the {} a {} may have (corrupt, or not a {}?)", path, kind.name,
                     st.st_size, mib(kind.max_bytes), kind.name, kind.name);
}

// Closes a descriptor on every path out of a scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

uint64_t check_input_file(const std::string& path, const InputKind& kind) {
  struct stat st {};
  SEQPAR_INPUT_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot read the {}: {}", path, kind.name, errno_text());
  check_stat(path, kind, st);
  return static_cast<uint64_t>(st.st_size);
}

int open_input_file(const std::string& path, const InputKind& kind, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused by fstat right after.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SEQPAR_INPUT_CHECK(fd >= 0, "{}: cannot open the {}: {}", path, kind.name, errno_text());
  FdCloser closer{fd};
  struct stat st {};
  SEQPAR_INPUT_CHECK(::fstat(fd, &st) == 0, "{}: cannot read the {}: {}", path, kind.name, errno_text());
  check_stat(path, kind, st);
  // Regular files ignore O_NONBLOCK, but clear it so later reads are ordinary ones.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = static_cast<uint64_t>(st.st_size);
  closer.fd = -1;
  return fd;
}

std::string read_input_file(const std::string& path, const InputKind& kind) {
  uint64_t size = 0;
  FdCloser fd{open_input_file(path, kind, &size)};
  // Read up to one byte past the cap: a file that grew since fstat (or a /proc file reporting
  // size 0) is still bounded.
  std::string out;
  out.reserve(static_cast<size_t>(size));
  std::vector<char> buf(1 << 16);
  for (;;) {
    const ssize_t n = ::read(fd.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    SEQPAR_INPUT_CHECK(n >= 0, "{}: read error in the {}: {}", path, kind.name, errno_text());
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
    SEQPAR_INPUT_CHECK(out.size() <= kind.max_bytes, "{}: the {} grew past the {} a {} may have while it was read",
                       path, kind.name, mib(kind.max_bytes), kind.name);
  }
  return out;
}

void check_json_depth(std::string_view text, const std::string& source, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      SEQPAR_INPUT_CHECK(++depth <= max_depth,
                         "{}: JSON nested more than {} levels deep (at byte {}): refused (corrupt or hostile file?)",
                         source, max_depth, i);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

std::string read_json_text(const std::string& path, const InputKind& kind, const std::string& source) {
  std::string text = read_input_file(path, kind);
  check_json_depth(text, source);
  return text;
}

nlohmann::json parse_json_input(std::string_view text, const std::string& source) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

void check_yaml_depth(std::string_view text, const std::string& source, int max_depth) {
  // YAML is printable text: a control character (NUL among them) is not allowed anywhere, and
  // yaml-cpp 0.7 takes one for a token boundary, reaching the comma loop below ("\0,\n\0,").
  for (size_t b = 0; b < text.size(); ++b) {
    const unsigned char c = static_cast<unsigned char>(text[b]);
    SEQPAR_INPUT_CHECK(c >= 0x20 || c == '\t' || c == '\n' || c == '\r',
                       "{}: control character 0x{:02x} at byte {}: YAML is printable text: refused", source,
                       static_cast<unsigned>(c), b);
    SEQPAR_INPUT_CHECK(c != 0x7f, "{}: control character 0x7f at byte {}: YAML is printable text: refused", source, b);
  }
  // Flow depth ([ and { outside quotes and comments) plus block depth (the stack of indentations
  // and the "- " entries that open a line): an upper bound of yaml-cpp's recursion.
  std::vector<size_t> indents;
  int flow = 0;
  size_t i = 0, line = 0;
  // A block scalar's content (after a line ending in | or >, with its indicators): the lines more
  // indented than the line that opened it are text, not structure.
  size_t block_scalar_indent = std::string::npos;
  char quote = 0;  // inside a quoted scalar, which may span lines
  auto refuse = [&](size_t at, int depth) {
    SEQPAR_INPUT_CHECK(depth <= max_depth,
                       "{}: YAML nested more than {} levels deep (at byte {}): refused (corrupt or hostile file?)",
                       source, max_depth, at);
  };
  while (i < text.size()) {
    // One line: its indentation, then its "- " entries, then the rest.
    size_t indent = 0;
    while (i < text.size() && text[i] == ' ') ++i, ++indent;
    const size_t line_end = std::min(text.find('\n', i), text.size());
    ++line;
    const bool content = quote == 0 && i < line_end && text[i] != '#' && text[i] != '\r';
    if (block_scalar_indent != std::string::npos) {
      if (!content || indent > block_scalar_indent) {
        i = line_end + 1;
        continue;
      }
      block_scalar_indent = std::string::npos;
    }
    if (content && flow == 0) {
      while (!indents.empty() && indents.back() >= indent) indents.pop_back();
      indents.push_back(indent);
      int dashes = 0;
      for (size_t j = i; j + 1 < line_end && (text[j] == '-' || text[j] == '?') && text[j + 1] == ' ';) {
        ++dashes;
        j += 2;
        while (j < line_end && text[j] == ' ') ++j;
      }
      refuse(i, static_cast<int>(indents.size()) + dashes);
    }
    size_t last = line_end;  // the line's last character outside a comment, for a block scalar's start
    // In block context, what the last token on this line was. A ',' after a plain word is that plain
    // scalar's text ("a, b"); anywhere else it is a flow indicator, which YAML does not allow outside
    // [ ] and { }, and which yaml-cpp 0.7 does not refuse but loops on, allocating without bound,
    // after a document's root node ("'a',", "[a] ,"), a tag or an anchor ("!t ,", "\"p\"&MU\","), or
    // at the start of a line below the root ("  a: 1\n, b"): refused, naming the line.
    enum { kLineStart, kNode, kProperty, kPlain } last_token = kLineStart;
    // In block context, whether a node may start here: at the line's start, after a "- " or "? "
    // entry, a ": " mapping indicator or a property (tag, anchor). Only there does '[' or '{' open a
    // flow collection; elsewhere it is a plain scalar's text ("co[n", "x [b", as yaml-cpp and PyYAML
    // read them), and a ',' on a later line is still outside any list.
    bool node_start = true;
    size_t closed_at = std::string::npos;  // the last closing quote on this line
    for (size_t j = i; j < line_end; ++j) {
      const char c = text[j];
      if (quote) {
        if (quote == '"' && c == '\\') {
          ++j;
        } else if (c == quote) {
          quote = 0;
          closed_at = j;
          if (flow == 0) last_token = kNode;
        }
        continue;
      }
      SEQPAR_INPUT_CHECK(c != ',' || flow > 0 || last_token == kPlain,
                         "{}: line {} has a ',' outside a [ ] or {{ }} list (at byte {}), where it can only be a "
                         "flow indicator: not valid YAML: refused",
                         source, line, j);
      const bool spaced = j + 1 == line_end || text[j + 1] == ' ' || text[j + 1] == '\t' || text[j + 1] == '\r';
      // (a quote right after a closing one starts another scalar, as yaml-cpp reads four quotes; the
      // flow indicators end a token only inside a list: in block context "a,\"b" is one plain word)
      const char prev = j == i ? ' ' : text[j - 1];
      const bool token_start = prev == ' ' || prev == '\t' || closed_at + 1 == j ||
                               (flow > 0 && (prev == '[' || prev == '{' || prev == ',' || prev == ':'));
      if ((c == '"' || c == '\'') && token_start) {
        quote = c;
        if (flow == 0) node_start = false;
      } else if (c == '#' && (j == i || text[j - 1] == ' ')) {
        last = j;
        break;  // a comment to the end of the line
      } else if ((c == '[' || c == '{') &&
                 (flow > 0 || ((node_start || last_token == kProperty) && (prev == ' ' || prev == '\t')))) {
        refuse(j, ++flow + static_cast<int>(indents.size()));
      } else if ((c == ']' || c == '}') && flow > 0) {
        if (--flow == 0) {
          last_token = kNode;
          node_start = false;
        }
      } else if (flow == 0 && (c == '-' || c == '?') && node_start && spaced) {
        last_token = kLineStart;  // a block entry: a node may follow
      } else if (flow == 0 && c == ':' && spaced && last_token != kLineStart) {
        last_token = kLineStart;  // "key: ": the value's node may follow (", x" may not)
        node_start = true;
      } else if (c != ' ' && c != '\t' && flow == 0 && c != ',' &&
                 (j == i || text[j - 1] == ' ' || text[j - 1] == '\t' || closed_at + 1 == j)) {
        // A word starts (a ':' inside a word does not end it: "!:a,b" is one tag).
        // ('!', '&' and '*' inside a plain scalar are its text: "a *b, c" is one word run)
        const bool property = (c == '!' || c == '&' || c == '*') && !(last_token == kPlain && !node_start);
        last_token = property ? kProperty : kPlain;
        if (!property) node_start = false;
      }
    }
    // "key: |", "- >-", "key: |2+ # comment": a block scalar follows.
    while (last > i && (text[last - 1] == ' ' || text[last - 1] == '\r')) --last;
    size_t k = last;
    while (k > i && (text[k - 1] == '-' || text[k - 1] == '+' || (text[k - 1] >= '1' && text[k - 1] <= '9'))) --k;
    if (content && flow == 0 && quote == 0 && k > i && (text[k - 1] == '|' || text[k - 1] == '>') &&
        (k - 1 == i || text[k - 2] == ' '))
      block_scalar_indent = indent;
    i = line_end + 1;
  }
}

}  // namespace seqpar
