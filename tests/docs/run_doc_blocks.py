#!/usr/bin/env python3
"""Docs are tests (issue 25): runs every shell block of one Markdown file as written.

A shell block is a fenced block opened by ```sh (or ```bash / ```shell). The blocks of one file
run in order, each in its own `bash -e -o pipefail`, all in one scratch directory that mirrors
the repository root (every top-level entry symlinked, `build` pointing at the build directory),
so relative paths in the docs (examples/..., tools/..., build/bin/...) work and the files a block
writes stay out of the checkout. PATH starts with <build>/bin, as the README asks of a user.

A block is skipped only when the line before its fence is a marker naming why:
    <!-- docs-test: skip gpu: needs an NVIDIA GPU -->
A block marked `<!-- docs-test: root: why -->` runs only as root (network namespaces; CI runs as
root) and is skipped otherwise. Fences may be indented (a block inside a list item).
A block of any language whose marker is `docs-test: file NAME` is written to NAME in the scratch
directory before the next shell block runs (a configuration file the text shows, e.g. job.toml).
Reasons: gpu, slurm, multi-host (needs what a CI machine has not), build (builds the project or
runs the test suite itself: CI does exactly that), long (a benchmark of minutes).
Any other marker, or a block left open, is an error.

Every shell block, skipped or not, is what a reader copies, so before anything runs it is checked
for placeholders (`...`, `<FILE>`, `--node-rank K`, a `$VARIABLE` that nothing on the page sets),
and a skipped block may use only files that exist in the repository or that a block before it on
the page (or itself, earlier) makes: a skipped block is never run, so nothing else would notice
that it uses a file the page never made (issue 36). Both are document errors (exit 2).

Exit 0: every block passed (or was skipped by a marker); 1: a block failed (its output is
printed); 2: usage error or malformed document; 77: the pipewright binary is not built.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from textwrap import dedent

FENCE_OPEN = re.compile(r"^\s*```(sh|bash|shell)\s*$")
FENCE_ANY = re.compile(r"^\s*```")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
SKIP_REASONS = ("gpu", "slurm", "multi-host", "build", "long")
# A build without an optional feature (the portable pip-torch build has neither) says so in one
# message; such a block and the rest of its page are skipped, not failed.
ABSENT_FEATURE = re.compile(r"built without (Graphviz|MPI|Chakra)")
# A block that would configure, build or test the build directory the scratch directory links
# to (`build` is the real one): it must carry `docs-test: skip build`, or it would rebuild the
# tree the other tests are running from.
BUILDS = re.compile(r"cmake\s+--preset|--build\s+build\b|-B\s*build\b|\btools/(test|quickstart)\b")


# What a reader would have to replace before running a line (comments are stripped first).
PLACEHOLDER = re.compile(
    r"(?<![\w./])\.\.\.(?![\w./])"                 # an elided argument: `run --pp 4 ...`
    r"|\u2026"                                        # the same as one character
    r"|<[A-Za-z][\w-]*>"                              # <FILE>, <node-rank>
    r"|(?:^|\s)--?[a-z][\w-]*[ =][A-Z]{1,2}(?=\s|$)")  # --node-rank K, --master-addr A
ENV_USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
ENV_SET = re.compile(r"(?:^|[\s;(&|])(?:export\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)=|\bfor\s+([A-Za-z_]\w*)\s+in\b")
# Set by the shell or the login, not by the page.
ENV_GIVEN = {"PATH", "PWD", "HOME", "USER", "TMPDIR", "SHELL", "OLDPWD", "HOSTNAME", "RANDOM"}
# A relative file a command reads or writes, by its extension.
FILE_TOKEN = re.compile(
    r"(?<![\w/.$-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:json|csv|npy|safetensors|toml|pt|txt|svg|html))\b")
# Text just before a file name that makes it: an output flag, a redirection, numpy's save(.
MAKES = re.compile(
    r"(?:(?:^|\s)(?:-o|--output|--save|--x-out|--y-out|--plan-out|--trace|--profile|--metrics|"
    r"--timeline|--outputs|--memory-svg)[ =]\s*|>\s*|save\(\s*['\"])$")


class DocError(Exception):
    pass


def strip_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*", "", ln) for ln in text.split("\n"))


def check_blocks(path, blocks, repo):
    """Raises DocError for a placeholder in any shell block, or a skipped block that uses a file
    that neither the repository nor an earlier block of the page provides."""
    code_of = [(line, strip_comments(text), skip, name) for line, text, skip, name in blocks]
    page_sets = set()
    for _, code, _, name in code_of:
        if name is None:
            for m in ENV_SET.finditer(code):
                page_sets.add(m.group(1) or m.group(2))
    made = set()
    for line, code, skip, name in code_of:
        if name is not None:
            made.add(name)
            continue
        for i, ln in enumerate(code.split("\n")):
            m = PLACEHOLDER.search(ln)
            if m:
                raise DocError(f"{path}:{line + i}: placeholder '{m.group(0).strip()}' in a runnable "
                               "block: write a command that runs as it stands (make the files it "
                               "uses on the page)")
            for v in ENV_USE.finditer(ln):
                if v.group(1) not in page_sets and v.group(1) not in ENV_GIVEN:
                    raise DocError(f"{path}:{line + i}: ${v.group(1)} is set nowhere on the page: "
                                   "a placeholder in a runnable block")
            for f in FILE_TOKEN.finditer(ln):
                token = f.group(1)
                if skip and token not in made and not os.path.exists(os.path.join(repo, token)) \
                        and not MAKES.search(ln[:f.start(1)]):
                    raise DocError(f"{path}:{line + i}: this block (skipped: {skip}) uses {token}, "
                                   "which nothing before it on the page makes")
                made.add(token)


def parse_blocks(path):
    """[(first line number of the body, body text, skip reason, file name or None)]."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    previous = ""  # the last non-blank line before the current one
    while i < len(lines):
        line = lines[i]
        if FENCE_ANY.match(line):
            is_shell = FENCE_OPEN.match(line) is not None
            start = i + 1
            j = start
            while j < len(lines) and not FENCE_CLOSE.match(lines[j]):
                j += 1
            if j == len(lines):
                raise DocError(f"{path}:{i + 1}: code block opened here is never closed")
            skip = None
            file_name = None
            m = MARKER.match(previous)
            if m and m.group(1).startswith("file "):
                file_name = m.group(1)[5:].strip()
                if not file_name or "/" in file_name or file_name.startswith("."):
                    raise DocError(f"{path}:{i}: bad docs-test file name '{file_name}'")
                blocks.append((start + 1, "\n".join(lines[start:j]) + "\n", None, file_name))
                previous = lines[j]
                i = j + 1
                continue
            if m and m.group(1).startswith("root"):
                if not is_shell:
                    raise DocError(f"{path}:{i}: docs-test marker before a block that is not ```sh")
                skip = None if os.geteuid() == 0 else "root"
                blocks.append((start + 1, dedent("\n".join(lines[start:j]) + "\n"), skip, None))
                previous = lines[j]
                i = j + 1
                continue
            if m:
                words = m.group(1).split(None, 2)
                if len(words) < 2 or words[0] != "skip" or words[1].rstrip(":") not in SKIP_REASONS:
                    raise DocError(
                        f"{path}:{i}: bad docs-test marker '{m.group(1)}': write "
                        f"'docs-test: skip REASON: why' with REASON one of {', '.join(SKIP_REASONS)}")
                if not is_shell:
                    raise DocError(f"{path}:{i}: docs-test marker before a block that is not ```sh")
                skip = words[1].rstrip(":")
            if is_shell:
                body = dedent("\n".join(lines[start:j]) + "\n")
                code = "\n".join(re.sub(r"(^|\s)#.*", "", ln) for ln in body.split("\n"))
                if skip is None and BUILDS.search(code):
                    raise DocError(f"{path}:{i + 1}: this block builds the project in build/: "
                                   "mark it <!-- docs-test: skip build: why -->")
                blocks.append((start + 1, body, skip, None))
            previous = lines[j]
            i = j + 1
            continue
        if line.strip():
            previous = line
        i += 1
    return blocks


def mirror_repo(repo, build_dir, scratch):
    for entry in os.listdir(repo):
        if entry in (".git", "build") or entry.startswith("build-"):
            continue
        os.symlink(os.path.join(repo, entry), os.path.join(scratch, entry))
    os.symlink(build_dir, os.path.join(scratch, "build"))


def run_block(text, cwd, env, timeout):
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -1, out.decode("utf-8", "replace"), True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("doc", help="the Markdown file")
    ap.add_argument("--repo", required=True, help="repository root")
    ap.add_argument("--build-dir", required=True, help="the build directory (with bin/)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per block")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--list", action="store_true", help="print the blocks and exit")
    args = ap.parse_args()

    repo = os.path.abspath(args.repo)
    build_dir = os.path.abspath(args.build_dir)
    doc = os.path.join(repo, args.doc) if not os.path.isabs(args.doc) else args.doc
    rel = os.path.relpath(doc, repo)
    try:
        blocks = parse_blocks(doc)
        check_blocks(rel, blocks, repo)
    except (OSError, DocError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for line, text, skip, file_name in blocks:
            tag = f" (skip: {skip})" if skip else f" (file {file_name})" if file_name else ""
            print(f"--- {rel}:{line}{tag}")
            print(text, end="")
        return 0
    if not os.access(os.path.join(build_dir, "bin", "pipewright"), os.X_OK):
        print(f"skip: {build_dir}/bin/pipewright is not built")
        return 77

    env = dict(os.environ)
    env["PATH"] = os.path.join(build_dir, "bin") + os.pathsep + env.get("PATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    scratch = tempfile.mkdtemp(prefix="pw-docs-")
    failed = 0
    stopped = False  # by a feature this build lacks
    try:
        mirror_repo(repo, build_dir, scratch)
        for line, text, skip, file_name in blocks:
            where = f"{rel}:{line}"
            if file_name:
                with open(os.path.join(scratch, file_name), "w", encoding="utf-8") as f:
                    f.write(text)
                print(f"FILE {where} -> {file_name}")
                continue
            if skip:
                print(f"SKIP {where} ({skip})")
                continue
            t0 = time.monotonic()
            rc, out, timed_out = run_block(text, scratch, env, args.timeout)
            dt = time.monotonic() - t0
            if rc == 0:
                print(f"PASS {where} ({dt:.1f} s)")
                continue
            absent = None if timed_out else ABSENT_FEATURE.search(out)
            if absent:
                print(f"SKIP {where} and the rest of the page: this pipewright was {absent.group(0)}")
                stopped = True
                break
            failed += 1
            why = f"timed out after {args.timeout:.0f} s" if timed_out else f"exit {rc}"
            print(f"FAIL {where} ({why}, {dt:.1f} s)\n--- block:\n{text}--- output:\n{out}---")
            break  # later blocks of a file usually build on earlier ones
    finally:
        if args.keep:
            print(f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    shell = sum(1 for b in blocks if b[3] is None)
    print(f"{rel}: {shell} shell blocks, {failed} failed")
    return 1 if failed else 77 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
