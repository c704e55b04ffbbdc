#!/usr/bin/env python3
"""Lists the functions of src/ and cmd/ by body length, longest first.

  scripts/function-lengths.py [--over N] [PATH...]   (default: src cmd, N = 0)

A function is a definition that starts at column 0 (Google style: namespace
bodies are not indented), its signature over one or more lines ending in its
opening brace, and ends at the next "}" at column 0; its body is the lines between
the two braces, blank lines and comments included. Lambdas and local classes
count toward the function they are in; member functions defined inside a
class body are not listed (the house keeps those short). Tests are
functions too (TEST_F bodies)."""
import re
import sys
from pathlib import Path

SKIP = re.compile(r'^(namespace|struct|class|union|enum|extern|typedef|using|template\s*<[^>]*>\s*(struct|class))\b')


CONTROL = re.compile(r'^(if|for|while|switch|else|do|try|catch|return|case|default)\b')


def functions(path):
    lines = path.read_text(errors="replace").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        text = line.lstrip()
        indent = line[:len(line) - len(text)]
        if not text or text.rstrip().endswith(":") or text.startswith(("#", "//", "}", "/*", "*", ":", ")")) or \
                SKIP.match(text) or \
                CONTROL.match(text) or (indent and not lines[i - 1].strip() in ("", "public:", "private:",
                                                                                 "protected:") and
                                        not lines[i - 1].rstrip().endswith((";", "}", "{"))
                                        and not lines[i - 1].strip().startswith("//")):
            i += 1
            continue
        # The signature starts here and may continue over a few lines: the
        # definition's brace ends its last line.
        j = i
        while j < len(lines) and j < i + 12 and not lines[j].rstrip().endswith(("{", ";", "}")):
            j += 1
        sig = " ".join(l.strip() for l in lines[i:j + 1])
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or "(" not in sig or \
                "=" in sig.split("(")[0] or "[" in sig.split("(")[0]:
            i = j + 1 if not indent else i + 1
            continue
        end = j + 1
        while end < len(lines) and not lines[end].startswith(indent + "}"):
            end += 1
        yield re.sub(r"\s*\{$", "", sig), i + 1, end - j - 1
        i = end + 1


def main(argv):
    over = 0
    if argv[:1] == ["--over"]:
        over = int(argv[1])
        argv = argv[2:]
    roots = argv or ["src", "cmd"]
    found = []
    for root in roots:
        p = Path(root)
        files = [p] if p.is_file() else sorted(list(p.rglob("*.cc")) + list(p.rglob("*.h")))
        for f in files:
            for name, line, body in functions(f):
                if body > over:
                    found.append((body, f"{f}:{line}", name))
    for body, where, name in sorted(found, reverse=True):
        print(f"{body:5d}  {where}  {name[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
