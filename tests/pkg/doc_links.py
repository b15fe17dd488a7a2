#!/usr/bin/env python3
"""Checks the links between the tree's Markdown pages.

Every link of README.md and docs/**/*.md to a file of the tree names a file
that exists, and a link with an anchor (`page.md#anchor`, or `#anchor` on
the same page) names a heading of that page, as GitHub makes its anchors
(duplicates get -1, -2, ...).  Links out of the tree (a scheme, or a path
that leaves it) are not checked.  Usage: doc_links.py TOP.  Prints each
broken link as FILE:LINE: TARGET (why); exit 1 if any.
"""
import os
import re
import sys

from doc_refs import anchor, headings

LINK = re.compile(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def anchors(path, cache):
    """Every anchor GitHub gives the headings of the page at path."""
    if path not in cache:
        seen, out = {}, set()
        with open(path, encoding='utf-8') as f:
            for _, title in headings(f.read()):
                a = anchor(re.sub(r'`|\*\*|\[([^\]]*)\]\([^)]*\)', r'\1', title))
                n = seen.get(a, 0)
                seen[a] = n + 1
                out.add(a if n == 0 else f'{a}-{n}')
        cache[path] = out
    return cache[path]


def pages(top):
    yield os.path.join(top, 'README.md')
    for root, _, files in os.walk(os.path.join(top, 'docs')):
        for name in sorted(files):
            if name.endswith('.md'):
                yield os.path.join(root, name)


def main(top):
    top = os.path.abspath(top)
    problems, cache = [], {}
    for page in pages(top):
        fence = False
        with open(page, encoding='utf-8') as f:
            lines = f.read().split('\n')
        for no, line in enumerate(lines, 1):
            if line.startswith('```'):
                fence = not fence
                continue
            if fence:
                continue
            for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):
                    continue
                path, _, frag = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) \
                    if path else page
                where = f'{os.path.relpath(page, top)}:{no}: {target}'
                if not dest.startswith(top + os.sep):
                    continue
                if not os.path.exists(dest):
                    problems.append(f'{where} (no such file)')
                elif frag and dest.endswith('.md') and \
                        frag not in anchors(dest, cache):
                    problems.append(f'{where} (no such heading)')
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))
