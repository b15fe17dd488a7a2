#!/usr/bin/env python3
"""Checks that docs/architecture.md's source map names what the tree holds.

The source map is the "## Source map" section of docs/architecture.md.  Its
tables say what each thing is by the first cell of their header row:

  | file | ...      every user/**/*.c, as its path from the top (a row may
                    name other files of the tree too, headers say)
  | function | ...  every function of the BPF program that an entry point
                    (a SEC() program) reaches, directly or through others
  | map | ...       every map the program defines (SEC(".maps")), and every
                    variable of its own at file scope (global data: .bss,
                    .data, .rodata, which libbpf makes maps of too)

and each row names its things as `code` in its first cell (several may share
a row).  The program is bpf/rlgate.bpf.c and the headers of bpf/ it includes.
Prints one line per problem - "missing from the source map: KIND NAME" for
what the tree has and the map lacks, "not in the tree: KIND NAME" for what
the map names that is gone - and exits 1 if there is any.

Usage: srcmap.py [--doc FILE] [--list] TOP
  --doc FILE  the page to check instead of TOP/docs/architecture.md
  --list      print what the tree holds (KIND NAME a line) and check nothing
"""
import os
import re
import sys

KINDS = ('file', 'function', 'map')


def strip_c(text):
    """text without comments, string and character literals (each replaced
    by a space or an empty literal, newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(' ' + '\n' * text.count('\n', i, j))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + text[i + 1:j] + c if c == '"' else "' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def unit_sources(bpf_dir, main='rlgate.bpf.c'):
    """The program's source files: main and the headers of bpf_dir it
    includes with #include "...", transitively, each once."""
    seen, order, todo = set(), [], [main]
    while todo:
        name = todo.pop(0)
        path = os.path.join(bpf_dir, name)
        if name in seen or not os.path.isfile(path):
            continue
        seen.add(name)
        order.append(path)
        text = open(path, encoding='utf-8').read()
        todo += re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)
    return order


TOKEN = re.compile(r'[A-Za-z_]\w*|"[^"]*"|\S')
NOT_CALLS = {'if', 'while', 'for', 'switch', 'return', 'sizeof', 'typeof',
             '__typeof__', 'SEC', '__attribute__', '__uint', '__type',
             '__array', '_Static_assert', 'defined'}


def split_macros(text):
    """(text without preprocessor lines, {macro name: its body})."""
    macros, keep, lines = {}, [], text.split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'\s*#', line):
            full = line
            while full.endswith('\\') and i + 1 < len(lines):
                i += 1
                full = full[:-1] + ' ' + lines[i]
                keep.append('')
            m = re.match(r'\s*#\s*define\s+(\w+)(\([^)]*\))?(.*)', full)
            if m:
                macros[m.group(1)] = m.group(3)
            keep.append('')
        else:
            keep.append(line)
        i += 1
    return '\n'.join(keep), macros


def definitions(text):
    """[(name, section or None, body tokens)] of each function defined at
    file scope in text (comments, strings and preprocessor lines gone)."""
    toks = TOKEN.findall(text)
    defs, depth, i = [], 0, 0
    while i < len(toks):
        t = toks[i]
        if t == '{' and depth == 0 and i > 0 and toks[i - 1] == ')':
            # walk back over the parameter list to the name before it
            j, d = i - 1, 0
            while j >= 0:
                d += toks[j] == ')'
                d -= toks[j] == '('
                if d == 0:
                    break
                j -= 1
            name = toks[j - 1] if j > 0 else ''
            # the body
            k, d = i, 0
            while k < len(toks):
                d += toks[k] == '{'
                d -= toks[k] == '}'
                if d == 0:
                    break
                k += 1
            if re.fullmatch(r'[A-Za-z_]\w*', name) and name not in NOT_CALLS:
                # SEC("x") just before the declaration: an entry point
                sec, b = None, j - 2
                while b >= 0 and toks[b] not in (';', '}', ')'):
                    b -= 1
                if b >= 3 and toks[b] == ')' and toks[b - 3] == 'SEC':
                    sec = toks[b - 1].strip('"')
                defs.append((name, sec, toks[i + 1:k]))
                i = k + 1
                continue
        depth += t == '{'
        depth -= t == '}'
        i += 1
    return defs


def globals_of(text):
    """Names of the variables text defines at file scope: statements at
    depth 0 with no braces and no parentheses (those are functions,
    prototypes, types, SEC() maps and the licence), not typedefs nor bare
    declarations of a type."""
    names, stmt, depth, braced = set(), [], 0, False
    for t in TOKEN.findall(text):
        if t == '{':
            if depth == 0:
                braced = True
            depth += 1
        elif t == '}':
            depth -= 1
            if depth == 0 and stmt and stmt[-1] == ')':
                stmt, braced = [], False        # a function's body ended
            continue
        if depth:
            continue
        if t != ';':
            stmt.append(t)
            continue
        if (stmt and not braced and '(' not in stmt and
                stmt[0] not in ('typedef', 'extern') and
                not (stmt[0] in ('struct', 'enum', 'union') and len(stmt) == 2)):
            cut = [i for i, x in enumerate(stmt) if x in ('=', '[')]
            head = stmt[:cut[0]] if cut else stmt
            if head and re.fullmatch(r'[A-Za-z_]\w*', head[-1]):
                names.add(head[-1])
        stmt, braced = [], False
    return names


def called(toks, funcs, macros, seen_macros=None):
    """Names of funcs that toks call or take the address of, through the
    macros they use."""
    seen_macros = set() if seen_macros is None else seen_macros
    out = set()
    for t in toks:
        if t in funcs:
            out.add(t)
        elif t in macros and t not in seen_macros:
            seen_macros.add(t)
            out |= called(TOKEN.findall(macros[t]), funcs, macros,
                          seen_macros)
    return out


def bpf_program(bpf_dir):
    """(functions an entry point reaches, entry points included; maps)."""
    bodies, entries, maps, macros = {}, set(), set(), {}
    for path in unit_sources(bpf_dir):
        text, m = split_macros(strip_c(open(path, encoding='utf-8').read()))
        macros.update(m)
        maps |= set(re.findall(r'(\w+)\s+SEC\s*\(\s*"\.maps"\s*\)', text))
        maps |= globals_of(text)
        for name, sec, body in definitions(text):
            bodies[name] = body
            if sec is not None:
                entries.add(name)
    reach, todo = set(), sorted(entries)
    while todo:
        f = todo.pop()
        if f in reach:
            continue
        reach.add(f)
        todo += sorted(called(bodies[f], bodies, macros) - reach)
    return reach, maps


def user_files(top):
    """Every user/**/*.c, as its path from top."""
    out = set()
    for d, _, files in os.walk(os.path.join(top, 'user')):
        for f in files:
            if f.endswith('.c'):
                out.add(os.path.relpath(os.path.join(d, f), top))
    return out


def tree(top):
    """{kind: set of names} of what the tree holds."""
    funcs, maps = bpf_program(os.path.join(top, 'bpf'))
    return {'file': user_files(top), 'function': funcs, 'map': maps}


def cells(row):
    return [c.strip() for c in row.strip().strip('|').split('|')]


def source_map(doc):
    """{kind: set of names} that the source map's tables name, or None when
    the page has no "## Source map" section."""
    m = re.search(r'^## Source map\n(.*?)(?=^## |\Z)', doc, re.S | re.M)
    if not m:
        return None
    named = {k: set() for k in KINDS}
    kind, fence = None, False
    for line in m.group(1).split('\n'):
        if line.startswith('```'):
            fence = not fence
        if fence or not line.startswith('|'):
            kind = None if not line.startswith('|') else kind
            continue
        first = cells(line)[0]
        if kind is None:            # a table's header row
            kind = first if first in KINDS else ''
            continue
        if kind:
            named[kind] |= set(re.findall(r'`([^`]+?)(?:\(\))?`', first))
    return named


def main(argv):
    doc_path, listing, args = None, False, []
    i = 0
    while i < len(argv):
        if argv[i] == '--doc' and i + 1 < len(argv):
            doc_path = argv[i + 1]
            i += 2
            continue
        if argv[i] == '--list':
            listing = True
        else:
            args.append(argv[i])
        i += 1
    if len(args) != 1:
        print(__doc__.strip().split('\n\n')[-1], file=sys.stderr)
        return 2
    top = args[0]
    have = tree(top)
    if listing:
        for k in KINDS:
            for name in sorted(have[k]):
                print(k, name)
        return 0
    doc_path = doc_path or os.path.join(top, 'docs', 'architecture.md')
    named = source_map(open(doc_path, encoding='utf-8').read())
    if named is None:
        print(f'{doc_path}: no "## Source map" section')
        return 1
    problems = []
    for k in KINDS:
        problems += [f'missing from the source map: {k} {n}'
                     for n in sorted(have[k] - named[k])]
        # a file row may name a header too: any file of the tree will do
        gone = {n for n in named[k] - have[k]
                if k != 'file' or not os.path.isfile(os.path.join(top, n))}
        problems += [f'not in the tree: {k} {n}' for n in sorted(gone)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
