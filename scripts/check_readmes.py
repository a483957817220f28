#!/usr/bin/env python3
"""Every source file is listed in its folder's README.md (issue 18): ctest `readme_listing`.

For each source file under the top folders below, the nearest README.md at or above its folder
(without leaving that top folder) must name it in the FIRST cell of a table row that also says
something about it (`| file | what |`). A first cell names a file by:
  - its path relative to the README, in backticks: `hvd/torch/optimizer.py`, `tcp/handshake.cc`
  - its name, or its name without extension, for a file in the README's own folder:
    `flags.cc`, `allreduce_bench -np N` (a program: the first word counts)
  - a pattern: `job_*.cc`, `core/engine.*`, `launcher.{h,cc}`; `*` and `?` never cross a `/`.
A pattern must have a literal part of its own (`*.cc`, `*`, `core/*` are refused: they would
list every file without saying what any of them owns). A first-cell name or pattern of
source files (`x.cc`, `x.*`) that matches no file is reported too (moved or deleted).

Usage: check_readmes.py [ROOT]       (default: the repository this script is in)
       check_readmes.py --self-test  (checks the checker on a scratch tree)
Exit status: 0 when everything is listed, 1 otherwise (each problem on a line of its own).
"""
import fnmatch
import os
import re
import sys
import tempfile

SRC = (".cc", ".h", ".c", ".py", ".proto", ".sh", ".js")
TOP = ["agent", "cli", "control", "launcherd", "runtime", "proto", "bench", "python", "scripts",
       "examples", "deploy", "tests"]
SKIP_DIRS = ("node_modules", "__pycache__", "corpus")


def expand(word):
    """`launcher.{h,cc}` -> launcher.h, launcher.cc; `a.h, b.cc` style commas -> both."""
    m = re.match(r"^(.*)\{([^}]*)\}(.*)$", word)
    if m:
        return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]
    return [w for w in word.split(",") if w]


def rows(text):
    """(line number, first-cell patterns) of each table row whose other cells say something."""
    out = []
    fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or not line.lstrip().startswith("|"):
            continue
        # `\|` inside a cell (e.g. `core\|socket`) is not a column break.
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) < 2 or re.fullmatch(r"[-: ]*", cells[0]):
            continue
        if len(re.sub(r"\W", "", " ".join(cells[1:]))) < 3:
            continue  # a row that names a file but says nothing about it lists nothing
        pats = []
        folder = ""  # `core/api.cc`, `api_sets.cc`: a bare name after a path is in its folder
        for tok in re.findall(r"`([^`]+)`", cells[0]):
            words = tok.split()
            if not words:
                continue
            for p in expand(words[0]):
                p = p.strip().rstrip(",;:")
                if "/" in p.rstrip("/"):
                    folder = p.rstrip("/").rsplit("/", 1)[0] + "/"
                elif folder and not p.endswith("/"):
                    p = folder + p
                pats.append(p)
        out.append((n, [p for p in pats if p]))
    return out


def too_broad(p):
    if not re.search(r"[*?\[]", p):
        return False  # a name without wildcards names one file, however short
    base = p.rstrip("/").split("/")[-1]
    ext = re.search(r"(\.[A-Za-z0-9]+)$", base)
    if ext and ext.group(1) not in SRC:
        return False  # `*.dict`: lists no source file, so it hides none
    literal = re.sub(r"\[[^\]]*\]|[*?]", "", base)
    literal = re.sub(r"\.[A-Za-z0-9]*$", "", literal)  # the extension alone says nothing
    return len(re.sub(r"[^A-Za-z0-9]", "", literal)) < 2


def matches(rel, p):
    """rel: a file's path relative to the README's folder."""
    if "/" in p:
        a, b = rel.split("/"), p.split("/")
        return len(a) == len(b) and all(fnmatch.fnmatchcase(x, y) for x, y in zip(a, b))
    if "/" in rel:
        return False  # a bare name lists a file of the README's own folder only
    return rel == p or os.path.splitext(rel)[0] == p or fnmatch.fnmatchcase(rel, p)


def source_files(base):
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(SRC):
                yield os.path.join(d, f)


def check(root):
    problems = []
    readmes = {}  # README path -> list of (line, pattern)

    def listing(readme):
        if readme not in readmes:
            pats = []
            with open(readme, encoding="utf-8") as fh:
                for n, ps in rows(fh.read()):
                    for p in ps:
                        if too_broad(p):
                            problems.append(
                                f"{os.path.relpath(readme, root)}:{n}: `{p}` would list every file "
                                f"it matches without saying what each owns: name the files, or "
                                f"use a pattern with a name in it (`job_*.cc`, `engine.*`)")
                        else:
                            pats.append((n, p))
            readmes[readme] = pats
        return readmes[readme]

    used = set()
    seen = 0
    for top in TOP:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for path in source_files(base):
            seen += 1
            d = os.path.dirname(path)
            while (not os.path.exists(os.path.join(d, "README.md"))
                   and os.path.abspath(d) != os.path.abspath(base)):
                d = os.path.dirname(d)
            readme = os.path.join(d, "README.md")
            shown = os.path.relpath(path, root)
            if not os.path.exists(readme):
                folder = os.path.relpath(os.path.dirname(path), root)
                problems.append(
                    f"{shown}: no README.md in {folder}/ or above it within {top}/: write "
                    f"{folder}/README.md with a table `| file | what |` and a row for "
                    f"`{os.path.basename(path)}` saying what it owns or tests")
                continue
            rel = os.path.relpath(path, d).replace(os.sep, "/")
            hit = [(n, p) for n, p in listing(readme) if matches(rel, p)]
            if not hit:
                problems.append(
                    f"{shown}: not listed in {os.path.relpath(readme, root)}: add the row "
                    f"| `{rel}` | what it owns or tests | (or name it in the first cell of the "
                    f"row that describes it, e.g. `{os.path.splitext(rel)[0]}.*`)")
            used.update((readme, p) for _, p in hit)

    if not seen:
        problems.append(f"{root}: no source file under {', '.join(TOP)}: is this the repository root?")
    # A first cell naming a source file that is not there any more.
    for readme, pats in sorted(readmes.items()):
        for n, p in pats:
            if (readme, p) not in used and (p.endswith(SRC) or p.endswith(".*")):
                problems.append(
                    f"{os.path.relpath(readme, root)}:{n}: `{p}` names no file (moved or "
                    f"deleted?): update or remove the row")
    return problems


def self_test():
    """The checker fails where it must: an unlisted file, a README-less folder, a catch-all
    pattern, a bare name used for a file in a subfolder, a row with no description."""
    def tree(files):
        root = tempfile.mkdtemp(prefix="check_readmes.")
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as fh:
                fh.write(text)
        return root

    good = tree({
        "agent/README.md": "| file | what |\n|---|---|\n| `launcher.{h,cc}` | the launcher |\n"
                           "| `job_*.cc` | jobs |\n| `sub/x.py`, `y.py` | the x and y |\n"
                           "| `main` | flags \\| signals |\n",
        "agent/launcher.h": "", "agent/launcher.cc": "", "agent/job_a.cc": "", "agent/main.cc": "",
        "agent/sub/x.py": "", "agent/sub/y.py": "", "agent/node_modules/y.js": "",
    })
    cases = {
        "unlisted": ({"agent/README.md": "| file | what |\n|---|---|\n| `a.cc` | a |\n",
                      "agent/a.cc": "", "agent/b.cc": ""}, "agent/b.cc: not listed"),
        "no README": ({"tests/x/a_test.cc": ""}, "tests/x/a_test.cc: no README.md"),
        "catch-all": ({"agent/README.md": "| file | what |\n|---|---|\n| `*.cc` | all of it |\n",
                       "agent/a.cc": ""}, "would list every file"),
        "bare name in subfolder": ({"agent/README.md": "| file | what |\n|---|---|\n"
                                    "| `x.py` | the x |\n", "agent/sub/x.py": ""},
                                   "agent/sub/x.py: not listed"),
        "star crossing a slash": ({"agent/README.md": "| file | what |\n|---|---|\n"
                                   "| `sub/*_x.py` | the x |\n", "agent/sub/deep/a_x.py": ""},
                                  "agent/sub/deep/a_x.py: not listed"),
        "no description": ({"agent/README.md": "| file | what |\n|---|---|\n| `a.cc` | |\n",
                            "agent/a.cc": ""}, "agent/a.cc: not listed"),
        "prose only": ({"agent/README.md": "`a.cc` does things.\n", "agent/a.cc": ""},
                       "agent/a.cc: not listed"),
        "empty root": ({"README.md": "nothing here\n"}, "is this the repository root?"),
        "stale row": ({"agent/README.md": "| file | what |\n|---|---|\n| `a.cc` | a |\n"
                       "| `gone.cc` | gone |\n", "agent/a.cc": ""}, "`gone.cc` names no file"),
    }
    failures = []
    if check(good):
        failures.append(f"a fully listed tree was refused: {check(good)}")
    for name, (files, want) in cases.items():
        got = check(tree(files))
        if not any(want in g for g in got):
            failures.append(f"{name}: expected a problem containing {want!r}, got {got}")
    for f in failures:
        print("check_readmes self-test:", f)
    if not failures:
        print(f"check_readmes self-test: {len(cases) + 1} cases pass")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"\n{len(problems)} problem(s): each source file needs a row in its folder's "
              f"README.md (the nearest one above it), `| file | what it owns |` "
              f"(scripts/check_readmes.py says what counts as a listing)")
        return 1
    print("every source file is listed in its folder's README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
