#!/usr/bin/env python3
"""lint-tests: refuses shell test code whose checks bash's `set -e` ignores.

Bats runs every test (and setup, teardown, and each helper they call) under
`set -e`, but bash exempts from it a command negated with `!` and every
command of an `a && b` list except the last.  Such a line is a check only
when it happens to be the function's last statement: anywhere else a false
result is dropped and the test goes on to pass.

    tools/lint-tests.py [FILE|DIR...]      default: the tests/ folder

Reads every *.bats and *.bash file given (folders: recursively) and prints
`FILE:LINE: ...` for each list of commands that
  - negates a command with `!` outside a condition (write `run ! cmd`, or
    `if cmd; then ...; return 1; fi`; `! cmd || fail` is refused too, for it
    reads as the bare form), or
  - joins commands with `&&` and does not end in a step of control flow
    (`break`, `continue`, `return`, `exit`, `skip`, an assignment, or a
    `{ ...; }` group ending in one of them): write `[[ a && b ]]`, two lines,
    an `if`, or add `|| fail ...`.
A list with an `||` (but for a `!`), a condition of `if`, `elif`, `while` or `until`, and
the inside of `$(...)`, quotes and `[[ ]]` / `(( ))` are not judged.
Exits 1 when it found any, 2 on a file it could not read, 0 otherwise.
"""

import os
import re
import sys

CONTROL = {"break", "continue", "return", "exit", "exec", "skip", "true", ":"}
ASSIGN_BUILTINS = {"local", "export", "declare", "typeset", "readonly"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
# functions whose every statement is a check: bats runs them, no caller
STRICT = {"_t", "setup", "teardown", "setup_file", "teardown_file"}


class Lexer:
    """Splits shell source into words and operators, keeping each word's line.

    Quotes, $(...), ${...}, backquotes, [[ ]] and (( )) are read as parts of
    one word, so nothing inside them is taken for an operator; comments and
    here-documents are dropped."""

    def __init__(self, text):
        self.s = text
        self.i = 0
        self.line = 1
        self.heredocs = []
        self.tokens = []

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def adv(self, n=1):
        for _ in range(n):
            if self.i < len(self.s):
                if self.s[self.i] == "\n":
                    self.line += 1
                self.i += 1

    def skip_single(self):
        self.adv()
        while self.i < len(self.s) and self.peek() != "'":
            self.adv()
        self.adv()

    def skip_double(self):
        self.adv()
        while self.i < len(self.s) and self.peek() != '"':
            if self.peek() == "\\":
                self.adv(2)
            elif self.peek() == "$":
                self.skip_dollar()
            elif self.peek() == "`":
                self.skip_backquote()
            else:
                self.adv()
        self.adv()

    def skip_backquote(self):
        self.adv()
        while self.i < len(self.s) and self.peek() != "`":
            if self.peek() == "\\":
                self.adv()
            self.adv()
        self.adv()

    def skip_quoted(self):
        """Skips one quoted or escaped piece at the cursor; False if none is."""
        c = self.peek()
        if c == "'":
            self.skip_single()
        elif c == '"':
            self.skip_double()
        elif c == "\\":
            self.adv(2)
        elif c == "`":
            self.skip_backquote()
        elif c == "$" and self.peek(1) in "({":
            self.skip_dollar()
        else:
            return False
        return True

    def skip_balanced(self, opening, closing, depth):
        """From just inside `depth` open brackets to just after the match;
        inside parentheses a comment runs to the end of its line."""
        while self.i < len(self.s) and depth:
            c = self.peek()
            if self.skip_quoted():
                continue
            if opening == "(" and c == "#" and (self.i == 0 or self.s[self.i - 1] in " \t\n;("):
                while self.i < len(self.s) and self.peek() != "\n":
                    self.adv()
                continue
            if c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
            self.adv()

    def skip_parens(self, depth):
        self.skip_balanced("(", ")", depth)

    def skip_dollar(self):
        nxt = self.peek(1)
        if nxt in "({":
            self.adv(2)
            self.skip_balanced(nxt, ")" if nxt == "(" else "}", 1)
        else:
            self.adv()

    def skip_until_word(self, closing):
        """Reads a [[ ... ]] up to its closing word."""
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t":
                self.adv()
                continue
            if c == "\\" and self.peek(1) == "\n":
                self.adv(2)
                continue
            if c == "\n":
                self.adv()
                continue
            w = self.read_word()
            if w == closing:
                return
            if not w:
                self.adv()  # an operator character: a plain character here

    def read_word(self):
        start = self.i
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\n;&|<>()":
                # ( inside a word: an array assignment or extglob
                if c == "(" and self.i > start and self.s[self.i - 1] in "=@!?*+":
                    self.adv()
                    self.skip_parens(1)
                    continue
                break
            if not self.skip_quoted():
                self.adv()
        return self.s[start:self.i]

    def emit(self, kind, text, line):
        self.tokens.append((kind, text, line))

    def read_heredocs(self):
        """After a newline: drops the bodies of the here-documents opened on
        the line just read."""
        for strip, delim in self.heredocs:
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                if end < 0:
                    end = len(self.s)
                text = self.s[self.i:end]
                self.line += 1
                self.i = end + 1
                if (text.lstrip("\t") if strip else text) == delim:
                    break
        self.heredocs = []

    def run(self):
        command_start = True
        while self.i < len(self.s):
            c = self.peek()
            line = self.line
            if c in " \t":
                self.adv()
            elif c == "\\" and self.peek(1) == "\n":
                self.adv(2)
            elif c == "\n":
                self.adv()
                self.emit("op", "\n", line)
                if self.heredocs:
                    self.read_heredocs()
                command_start = True
            elif c == "#":
                while self.i < len(self.s) and self.peek() != "\n":
                    self.adv()
            elif self.s.startswith("&&", self.i) or self.s.startswith("||", self.i):
                self.emit("op", self.s[self.i:self.i + 2], line)
                self.adv(2)
                command_start = True
            elif self.s.startswith(";;", self.i) or self.s.startswith(";&", self.i):
                self.emit("op", ";;", line)
                self.adv(2)
                command_start = True
            elif c in ";&|":
                # |& and &> are pipes and redirections, not separators
                if c == "&" and self.peek(1) == ">":
                    self.adv(2)
                    self.read_word_after_space()
                    continue
                if c == "|" and self.peek(1) == "&":
                    self.adv()
                self.adv()
                self.emit("op", c, line)
                command_start = True
            elif c in "<>":
                # a redirection: its operator and target belong to the command
                if self.s.startswith("<<<", self.i):
                    self.adv(3)
                    self.read_word_after_space()
                elif self.s.startswith("<<", self.i):
                    self.adv(2)
                    strip = self.peek() == "-"
                    if strip:
                        self.adv()
                    w = self.read_word_after_space()
                    self.heredocs.append((strip, w.strip("'\"").replace("\\", "")))
                elif c == "<" and self.peek(1) == "(" or c == ">" and self.peek(1) == "(":
                    self.adv(2)
                    self.skip_parens(1)
                else:
                    self.adv()
                    while self.peek() in ">&|":
                        self.adv()
                    self.read_word_after_space()
            elif c == "(" and command_start and self.peek(1) == "(":
                self.adv(2)
                self.skip_parens(2)
                self.emit("word", "((", line)
                command_start = False
            elif c in "()":
                self.adv()
                self.emit("op", c, line)
                command_start = True
            else:
                w = self.read_word()
                if not w:
                    self.adv()
                    continue
                if command_start and w == "[[":
                    self.skip_until_word("]]")
                    self.emit("word", "[[", line)
                    command_start = False
                    continue
                self.emit("word", w, line)
                # these words leave the next word in command position
                command_start = command_start and (
                    w in {"!", "then", "do", "else", "elif", "if", "while",
                          "until", "for", "{", "}", "time"})
        self.emit("op", "\n", self.line)
        return self.tokens

    def read_word_after_space(self):
        while self.peek() in " \t":
            self.adv()
        return self.read_word()


class List:
    """One and-or list being read: its pipelines' leading words and operators."""

    def __init__(self, line, condition):
        self.line = line
        self.condition = condition
        self.ops = []          # "&&" and "||" between the pipelines
        self.bang = False      # some pipeline starts with !
        self.last_word = None  # first word of the last pipeline's first command
        self.last_group = None  # the List that ended the last { } group
        self.expect_command = True


def control(w):
    """Whether a command starting with word w is a step of control flow or an
    assignment: what a condition may guard with `&&`."""
    return w in CONTROL or w in ASSIGN_BUILTINS or bool(w and ASSIGNMENT.match(w))


def judge(lst, path):
    """The problem with one and-or list, or None."""
    if lst is None or lst.condition:
        return None
    if lst.bang:
        # `! cmd || fail` does fail, but reads as the bare `! cmd` that does
        # not: one form, `if cmd; then ...; fi`, for both readers
        return (f"{path}:{lst.line}: `! cmd` outside a condition: set -e "
                "ignores it alone (use `run ! cmd` or `if cmd; then ...; return 1; fi`)")
    if "||" in lst.ops:
        return None
    if "&&" not in lst.ops:
        return None
    w = lst.last_word
    if control(w):
        return None
    if w == "{" and lst.last_group is not None and control(lst.last_group.last_word):
        return None
    return (f"{path}:{lst.line}: `a && b` whose first commands set -e "
            "ignores (use `[[ a && b ]]`, separate lines, `if`, or `|| fail ...`)")


def lint_text(text, path):
    """The problems of one file's source, as 'PATH:LINE: message' strings."""
    # a bats test is a function for the shell: read its header as one
    text = re.sub(r"(?m)^(\s*)@test\s+(\"(?:[^\"\\]|\\.)*\"|'[^']*'|\S+)\s*\{",
                  lambda m: m.group(1) + "_t() {", text)
    tokens = Lexer(text).run()
    problems = []
    # a stack of frames, one per open block; each holds the list being read
    # and what kind of block it is (conditions of if/while are not judged)
    stack = [{"kind": "top", "list": None, "cond": False}]

    def frame():
        return stack[-1]

    def new_list(line):
        f = frame()
        if f["list"] is None:
            f["list"] = List(line, f["cond"])
        return f["list"]

    def end_list():
        f = frame()
        msg = judge(f["list"], path)
        if f["list"] is not None and f.get("pending"):
            problems.append(f.pop("pending"))  # another statement followed
        if msg and f.get("last_exempt"):
            f["pending"] = msg  # wrong only if another statement follows
        elif msg:
            problems.append(msg)
        if f["list"] is not None:
            f["last"] = f["list"]
        f["list"] = None
        return f.get("last")

    i = 0
    n = len(tokens)
    func = None  # the function whose body the next { opens
    while i < n:
        kind, text_, line = tokens[i]
        f = frame()
        if kind == "op":
            if text_ == ";;" and f["kind"] == "case":
                end_list()
                i = skip_pattern(tokens, i) + 1
                continue
            if text_ in ("\n", ";", "&", ";;"):
                if f["list"] is not None and f["list"].expect_command and f["list"].ops:
                    pass  # a newline after && or ||: the list goes on
                else:
                    end_list()
            elif text_ in ("&&", "||"):
                lst = new_list(line)
                lst.ops.append(text_)
                lst.expect_command = True
            elif text_ == "|":
                lst = new_list(line)
                lst.expect_command = True
            elif text_ == "(":
                if f["list"] is not None and not f["list"].expect_command:
                    # name(): a function definition follows
                    if i + 1 < n and tokens[i + 1][1] == ")":
                        func = f["list"].last_word
                        f["list"] = None
                        i += 2
                        continue
                lst = new_list(line)
                lst.last_word = "("
                lst.expect_command = False
                # a subshell's status is its last command's
                stack.append({"kind": "(", "list": None, "cond": False,
                              "last_exempt": True})
            elif text_ == ")":
                if f["kind"] == "(":
                    inner = end_list()
                    f.pop("pending", None)
                    stack.pop()
                    stack[-1]["list"].last_group = inner
                # else: a case pattern's end, nothing to judge
            i += 1
            continue

        # a word
        lst = f["list"]
        at_command = lst is None or lst.expect_command
        if at_command:
            if text_ in ("if", "while", "until"):
                outer = new_list(line)
                outer.last_word = text_
                outer.expect_command = False
                stack.append({"kind": text_, "list": None, "cond": True})
            elif text_ in ("then", "do") and f["kind"] in ("if", "while", "until", "for", "select"):
                end_list()
                f["cond"] = False
            elif text_ == "elif" and f["kind"] == "if":
                end_list()
                f["cond"] = True
            elif text_ == "else" and f["kind"] == "if":
                end_list()
                f["cond"] = False
            elif text_ in ("for", "select"):
                outer = new_list(line)
                outer.last_word = text_
                outer.expect_command = False
                stack.append({"kind": text_, "list": None, "cond": True})
                # skip to `do`
                while i + 1 < n and tokens[i + 1][1] != "do":
                    i += 1
            elif text_ == "case":
                outer = new_list(line)
                outer.last_word = text_
                outer.expect_command = False
                stack.append({"kind": "case", "list": None, "cond": False})
                while i + 1 < n and tokens[i + 1][1] != "in":
                    i += 1
                i = skip_pattern(tokens, i + 1)
            elif text_ in ("fi", "done", "esac") and f["kind"] != "top":
                inner = end_list()
                stack.pop()
                stack[-1]["list"].last_group = inner
            elif text_ == "{":
                outer = new_list(line)
                outer.last_word = "{"
                outer.expect_command = False
                # a helper's status is its last command's, which its
                # caller checks; tests, setup and teardown have none
                stack.append({"kind": "{", "list": None, "cond": False,
                              "last_exempt": func is not None and func not in STRICT})
                func = None
            elif text_ == "}" and f["kind"] == "{":
                inner = end_list()
                f.pop("pending", None)
                stack.pop()
                stack[-1]["list"].last_group = inner
            elif text_ == "!":
                new_list(line).bang = True
            else:
                lst = new_list(line)
                lst.last_word = text_
                lst.last_group = None
                lst.expect_command = False
        i += 1
    end_list()
    return problems


def skip_pattern(tokens, i):
    """From the token before a case pattern: the index of the ) that ends it,
    or of the token before `esac`."""
    n = len(tokens)
    while i + 1 < n and tokens[i + 1][1] == "\n":
        i += 1
    if i + 1 < n and tokens[i + 1][1] == "esac":
        return i
    while i + 1 < n and tokens[i + 1][1] != ")":
        i += 1
    return i + 1


def files(args):
    for a in args:
        if os.path.isdir(a):
            for root, dirs, names in os.walk(a):
                dirs.sort()
                for name in sorted(names):
                    if name.endswith((".bats", ".bash")):
                        yield os.path.join(root, name)
        else:
            yield a


def main(argv):
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = argv[1:] or [os.path.join(top, "tests")]
    problems = []
    for path in files(args):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as e:
            print(f"couldn't read '{path}': {e.strerror}", file=sys.stderr)
            return 2
        problems += lint_text(text, path)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
