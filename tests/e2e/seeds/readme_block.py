#!/usr/bin/env python3
"""Prints one tutorial block of README.md as a bash script, with a test's changes applied.

  readme_block.py README.md ID [--sub OLD NEW]... [--flag NAME VALUE]...

A block is a fenced code block whose first line is "# tutorial: ID". --sub replaces literal text
(a placeholder such as <path/to/raw.json>, or a value inside the block's JSON); --flag NAME VALUE
replaces the value after every "NAME" in the block. Each change must apply at least once, so a
README edit that drops a flag the test changes fails the test instead of running something else.
"""
import re
import sys


def block(readme, ident):
    lines = open(readme, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == f"# tutorial: {ident}" and i > 0 and lines[i - 1].startswith("```"):
            out = []
            for body in lines[i + 1:]:
                if body.startswith("```"):
                    return "\n".join(out) + "\n"
                out.append(body)
    sys.exit(f"readme_block.py: {readme} has no block '# tutorial: {ident}'")


def main():
    readme, ident, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = block(readme, ident)
    if len(args) % 3:
        sys.exit("readme_block.py: changes come as --sub OLD NEW or --flag NAME VALUE")
    for kind, old, new in zip(args[::3], args[1::3], args[2::3]):
        if kind == "--sub":
            if old not in text:
                sys.exit(f"readme_block.py: block {ident} has no '{old}' to change")
            text = text.replace(old, new)
        elif kind == "--flag":
            pattern = re.compile(r"(?<=\s)" + re.escape(old) + r"(\s+|=)(\S+)")
            text, n = pattern.subn(lambda m: old + m.group(1) + new, text)
            if n == 0:
                sys.exit(f"readme_block.py: block {ident} has no flag {old} to change")
        else:
            sys.exit(f"readme_block.py: unknown option {kind}")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
