#!/usr/bin/env python3
# Rerun: python3 tools/make_hf_unicode_table.py   (needs the HF `tokenizers` package and libutf8proc.so.2)
"""Where HF `tokenizers`' Unicode data differ from utf8proc's, found by asking both about every code point.

seqpar takes its Unicode tables from utf8proc (src/io/tokenizer_unicode.cpp). HF `tokenizers` has two tables
of its own, of other Unicode versions:

  - its normalizers (NFC, NFD, NFKC, NFKD) use the unicode-normalization-alignments crate, whose tables are
    Unicode 9.0: a combining mark or a decomposition added since is, to HF, a plain character (combining
    class 0, no decomposition, composes with nothing);
  - its Split regexes run on Oniguruma, whose \\p{L}, \\p{N} and \\s follow a newer Unicode than utf8proc may.

To give HF's ids byte for byte, seqpar applies these differences on top of utf8proc. This script writes them
to src/io/tokenizer_hf_unicode.cpp, with the utf8proc Unicode version they were computed against (a test
checks that seqpar runs with that version), and tests/fixtures/tokenizer/hf_unicode.json: HF's normalization
of a probe string for every code point in the first table and HF's class of every code point in the second,
which tests/io/test_tokenizer_normalizers.cpp checks seqpar reproduces.
"""

import ctypes
import json
import os
import random

from tokenizers import Regex, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

lib = ctypes.CDLL("libutf8proc.so.2")


class Property(ctypes.Structure):  # the leading fields of utf8proc_property_t
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]


lib.utf8proc_get_property.restype = ctypes.POINTER(Property)
lib.utf8proc_category.restype = ctypes.c_int
lib.utf8proc_unicode_version.restype = ctypes.c_char_p
lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
for f in ("utf8proc_NFD", "utf8proc_NFC", "utf8proc_NFKD", "utf8proc_NFKC"):
    getattr(lib, f).restype = ctypes.c_char_p
    getattr(lib, f).argtypes = [ctypes.c_char_p]

UTF8PROC_DECOMPOSE, UTF8PROC_COMPAT = 1 << 4, 1 << 2
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
HF = {"NFC": normalizers.NFC(), "NFD": normalizers.NFD(), "NFKC": normalizers.NFKC(), "NFKD": normalizers.NFKD()}


def utf8proc_form(form, s):
    return getattr(lib, "utf8proc_" + form)(s.encode()).decode()


def ranges(points):
    out = []
    for c in sorted(points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def probe(c):
    # A mark of class 230 before c and one of class 1 after it: canonical ordering moves them by
    # c's combining class; "a" before lets c compose or block; c alone shows its decomposition.
    return "a\u0301" + chr(c) + "\u0334 " + chr(c)


def normalizer_unknown():
    buf = (ctypes.c_int32 * 32)()
    candidates = []
    for c in CODE_POINTS:
        n = lib.utf8proc_decompose_char(c, buf, 32, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, None)
        if lib.utf8proc_get_property(c).contents.combining_class != 0 or n != 1 or buf[0] != c:
            candidates.append(c)
    unknown = [c for c in candidates
               if any(HF[f].normalize_str(probe(c)) != utf8proc_form(f, probe(c)) for f in HF)]
    return candidates, unknown


# utf8proc categories (utf8proc.h): 1..5 letters, 9..11 numbers, 23..25 separators.
def utf8proc_class(c):
    if 0x09 <= c <= 0x0D or c == 0x85:
        return 3
    cat = lib.utf8proc_category(c)
    return 1 if 1 <= cat <= 5 else 2 if 9 <= cat <= 11 else 3 if 23 <= cat <= 25 else 0


def hf_classes():
    """HF's (Oniguruma's) class of every code point: \\p{L} = 1, \\p{N} = 2, \\s = 3, else 0."""
    text = "".join(chr(c) for c in CODE_POINTS)
    cls = [0] * len(CODE_POINTS)
    for k, pattern in ((1, r"\p{L}"), (2, r"\p{N}"), (3, r"\s")):
        # Split(removed) keeps what does not match (character offsets): the rest matches.
        matched = [True] * len(CODE_POINTS)
        for _, (b, e) in pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text):
            matched[b:e] = [False] * (e - b)
        for i, m in enumerate(matched):
            if m:
                assert cls[i] == 0, f"U+{CODE_POINTS[i]:04X} in two classes"
                cls[i] = k
    return cls


CLASS_NAMES = ["kOther", "kLetter", "kNumber", "kSpace"]


def main():
    version = lib.utf8proc_unicode_version().decode()
    candidates, unknown = normalizer_unknown()
    hf = hf_classes()
    diff = [(c, hf[i]) for i, c in enumerate(CODE_POINTS) if hf[i] != utf8proc_class(c)]
    class_ranges = []
    for c, k in diff:
        if class_ranges and class_ranges[-1][1] == c - 1 and class_ranges[-1][2] == k:
            class_ranges[-1][1] = c
        else:
            class_ranges.append([c, c, k])
    print(f"utf8proc Unicode {version}: {len(candidates)} code points with a class or decomposition, "
          f"{len(unknown)} unknown to HF's normalizer ({len(ranges(unknown))} ranges); "
          f"{len(diff)} code points whose regex class differs ({len(class_ranges)} ranges)")

    def rows(items, fmt, per_line):
        out, row = [], []
        for it in items:
            row.append(fmt(it))
            if len(row) == per_line:
                out.append("    " + ", ".join(row) + ",")
                row = []
        if row:
            out.append("    " + ", ".join(row) + ",")
        return out

    norm_ranges = ranges(unknown)
    lines = [
        "// GENERATED by tools/make_hf_unicode_table.py from HF `tokenizers` and utf8proc: do not edit.",
        f"// Where HF tokenizers' Unicode data differ from utf8proc's (Unicode {version}); the script says why.",
        '#include "io/tokenizer.h"',
        "",
        "namespace seqpar::tokenizer_detail {",
        "",
        "namespace {",
        "struct Range {",
        "  char32_t lo, hi;",
        "};",
        "struct ClassRange {",
        "  char32_t lo, hi;",
        "  CharClass cls;",
        "};",
        "",
        "// Code points with a combining class or a decomposition in utf8proc that HF's normalizers (Unicode 9.0",
        "// tables) treat as plain characters.",
        f"constexpr Range kNormalizerPlain[{max(1, len(norm_ranges))}] = {{",
        *rows(norm_ranges, lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}}}", 4),
        "};",
        "",
        "// HF's regex class (Oniguruma) where it is not utf8proc's.",
        f"constexpr ClassRange kRegexClass[{max(1, len(class_ranges))}] = {{",
        *rows(class_ranges, lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, CharClass::{CLASS_NAMES[r[2]]}}}", 2),
        "};",
        "",
        "template <typename R, size_t N>",
        "const R* find(const R (&table)[N], char32_t c) {",
        "  size_t lo = 0, hi = N;  // the first range with hi >= c",
        "  while (lo < hi) {",
        "    const size_t mid = (lo + hi) / 2;",
        "    if (table[mid].hi < c) {",
        "      lo = mid + 1;",
        "    } else {",
        "      hi = mid;",
        "    }",
        "  }",
        "  return lo < N && table[lo].lo <= c && c <= table[lo].hi ? &table[lo] : nullptr;",
        "}",
        "}  // namespace",
        "",
        f'const char* hf_unicode_tables_version() {{ return "{version}"; }}',
        "",
        "bool hf_normalizer_plain(char32_t c) { return find(kNormalizerPlain, c) != nullptr; }",
        "",
        "std::optional<CharClass> hf_regex_class(char32_t c) {",
        "  const ClassRange* r = find(kRegexClass, c);",
        "  if (!r) return std::nullopt;",
        "  return r->cls;",
        "}",
        "",
        "}  // namespace seqpar::tokenizer_detail",
        "",
    ]
    if not norm_ranges:
        lines[lines.index(f"constexpr Range kNormalizerPlain[1] = {{") + 1:1] = ["    {0x110000, 0x110000},"]
    path = os.path.join(ROOT, "src/io/tokenizer_hf_unicode.cpp")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {path}")

    rng = random.Random(15)
    sample = sorted(set(rng.choice(CODE_POINTS) for _ in range(1500)) |
                    {0x1FAE8, 0x11F00, 0x11F04, 0x11F50, 0x31350, 0x1E4D0, 0x2EBF0, 0x105C0, 0x3000, 0x85, 0x1C})
    fixture = {
        "utf8proc_unicode_version": version,
        "normalized": [{"text": probe(c), **{f: n.normalize_str(probe(c)) for f, n in HF.items()}} for c in unknown],
        # HF's class of a sample of code points (not of the differences alone, which the table is):
        # both ends of every range of the table, and random code points over the whole space.
        "classes": sorted({(c, hf[CODE_POINTS.index(c)] if c < 0xD800 else hf[c - 0x800])
                           for c in [x for r in class_ranges for x in (r[0], r[1])] + sample}),
    }
    path = os.path.join(ROOT, "tests/fixtures/tokenizer/hf_unicode.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
