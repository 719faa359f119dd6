#!/usr/bin/env python3
"""List non-test Rust files over a line limit and functions over a line limit.

Issue 44's size criteria: no non-test Rust file over 1,000 lines and no function
over 200. Usage:

    scripts/size_limits.py [--file-limit 1000] [--fn-limit 200] [--check] [PATH...]

PATH defaults to the repository root. Test code is left out as well as a small
scanner can: files under a `tests/` or `benches/` directory, files named
`tests.rs` or `*_tests.rs`, and the body of any item right after `#[cfg(test)]`
(usually `mod tests { ... }`). A file's line count is taken after removing those
blocks. Functions are found by the `fn NAME` token and measured from the `fn`
line to its matching closing brace; strings, chars and comments are skipped
during brace matching. With `--check` the exit status is 1 when anything is
over a limit.
"""

import argparse
import os
import re
import sys

SKIP_DIRS = {"target", ".git", ".tools", "node_modules", "tests", "benches"}
FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def is_test_file(path):
    base = os.path.basename(path)
    return base == "tests.rs" or base.endswith("_tests.rs")


def mask(src):
    """Return src with strings, chars and comments replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif (c == "r" and re.match(r'r#*"', src[i:i + 8])
              and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            # char literal ('a', '\n', '\u{..}') vs lifetime ('a)
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(masked, open_idx):
    depth = 0
    for j in range(open_idx, len(masked)):
        ch = masked[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(masked) - 1


def test_spans(masked):
    """Character spans of items that follow #[cfg(test)]."""
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]", masked):
        j = m.end()
        # the item ends at its first top-level `;` or its matching `}`
        k = j
        while k < len(masked) and masked[k] not in "{;":
            k += 1
        if k < len(masked) and masked[k] == "{":
            spans.append((m.start(), match_brace(masked, k)))
        else:
            spans.append((m.start(), k))
    return spans


def line_of(src, idx):
    return src.count("\n", 0, idx) + 1


def scan(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        src = f.read()
    masked = mask(src)
    spans = test_spans(masked)

    def in_test(idx):
        return any(a <= idx <= b for a, b in spans)

    total = src.count("\n") + (0 if src.endswith("\n") or not src else 1)
    test_lines = sum(line_of(src, b) - line_of(src, a) + 1 for a, b in spans)
    fns = []
    for m in FN_RE.finditer(masked):
        if in_test(m.start()):
            continue
        # the body opens at the first `{` before any `;` (a `;` first means a declaration)
        k = m.end()
        depth_paren = 0
        while k < len(masked):
            ch = masked[k]
            if ch in "([":
                depth_paren += 1
            elif ch in ")]":
                depth_paren -= 1
            elif ch == ";" and depth_paren == 0:
                k = -1
                break
            elif ch == "{" and depth_paren == 0:
                break
            k += 1
        if k < 0 or k >= len(masked):
            continue
        end = match_brace(masked, k)
        start_line = line_of(src, m.start())
        fns.append((m.group(1), start_line, line_of(src, end) - start_line + 1))
    return total - test_lines, fns


def walk(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(".rs"):
                    yield os.path.join(dirpath, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--file-limit", type=int, default=1000)
    ap.add_argument("--fn-limit", type=int, default=200)
    ap.add_argument("--check", action="store_true", help="exit 1 when anything is over a limit")
    args = ap.parse_args()
    roots = args.paths or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")]

    long_files, long_fns = [], []
    for path in walk(roots):
        if is_test_file(path):
            continue
        lines, fns = scan(path)
        rel = os.path.relpath(path)
        if lines > args.file_limit:
            long_files.append((lines, rel))
        for name, line, n in fns:
            if n > args.fn_limit:
                long_fns.append((n, f"{rel}:{line}", name))

    print(f"files over {args.file_limit} lines (tests left out): {len(long_files)}")
    for lines, rel in sorted(long_files, reverse=True):
        print(f"  {lines:6d}  {rel}")
    print(f"functions over {args.fn_limit} lines: {len(long_fns)}")
    for n, loc, name in sorted(long_fns, reverse=True):
        print(f"  {n:6d}  {name:32s} {loc}")
    if args.check and (long_files or long_fns):
        sys.exit(1)


if __name__ == "__main__":
    main()
