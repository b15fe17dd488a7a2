#!/usr/bin/env python3
"""Checks docs/operations.md's table of contents and the references to it.

Every ## and ### heading of operations.md is listed in its "Contents" section
with the anchor GitHub gives it, in order; every `operations.md, "TITLE"`
written anywhere in the tree's docs, rules, unit, scripts and sources names
a heading of it.  Usage: doc_refs.py TOP.  Prints each problem; exit 1 if any.
"""
import os
import re
import sys


def anchor(title):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    a = title.strip().lower()
    a = re.sub(r'[^\w\- ]', '', a)
    return a.replace(' ', '-')


def headings(text):
    """(level, title) of every heading outside code blocks."""
    out, fence = [], False
    for line in text.split('\n'):
        if line.startswith('```'):
            fence = not fence
            continue
        m = re.match(r'^(#{1,6}) (.+?)\s*$', line)
        if m and not fence:
            out.append((len(m.group(1)), m.group(2)))
    return out


def main(top):
    problems = []
    path = os.path.join(top, 'docs', 'operations.md')
    text = open(path, encoding='utf-8').read()
    heads = headings(text)
    titles = {t for _, t in heads}

    # the contents: "- [TITLE](#ANCHOR)" lines, nested by two spaces
    m = re.search(r'^## Contents\n(.*?)\n## ', text, re.S | re.M)
    if not m:
        problems.append('operations.md has no "## Contents" section')
        toc = []
    else:
        toc = re.findall(r'^( *)- \[(.+?)\]\(#([^)]+)\)$', m.group(1), re.M)
    want = [(lvl, t) for lvl, t in heads if lvl in (2, 3) and t != 'Contents']
    got = [(2 + len(ind) // 2, t) for ind, t, _ in toc]
    if got != want:
        for lvl, t in want:
            if (lvl, t) not in got:
                problems.append(f'Contents lacks {"#" * lvl} {t}')
        for lvl, t in got:
            if (lvl, t) not in want:
                problems.append(f'Contents lists {"#" * lvl} {t}, not a heading at that level')
        if not problems:
            problems.append('Contents is not in the order of the headings')
    for _, t, a in toc:
        if a != anchor(t):
            problems.append(f'Contents links {t} to #{a}, GitHub makes #{anchor(t)}')
    seen = {}
    for _, t in heads:
        seen[anchor(t)] = seen.get(anchor(t), 0) + 1
    for a, n in seen.items():
        if n > 1:
            problems.append(f'{n} headings share the anchor #{a}')

    # the references, across line breaks and comment markers
    roots = ['README.md', 'docs', 'contrib', 'tools', 'user', 'debian', 'bpf', 'lua']
    ref = re.compile(r'operations\.md,\s+"([^"]+)"')
    for root in roots:
        base = os.path.join(top, root)
        files = [base] if os.path.isfile(base) else [
            os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs]
        for f in sorted(files):
            try:
                body = open(f, encoding='utf-8').read()
            except (UnicodeDecodeError, OSError):
                continue
            # join lines, dropping what starts a comment or a YAML string
            flat = re.sub(r'\n[ \t]*(?:#|//|\*|--)?[ \t]*', ' ', body)
            for r in ref.findall(flat):
                r = re.sub(r'\s+', ' ', r)
                if r not in titles:
                    problems.append(f'{os.path.relpath(f, top)}: "{r}" is no heading of operations.md')
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))
