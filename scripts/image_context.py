#!/usr/bin/env python3
"""Rebuilds the files the build stage of a Dockerfile sees: the build context (the repository's
tracked files minus what <Dockerfile>.dockerignore excludes), copied as the stage's COPY lines copy
it into its WORKDIR.

Why: no container engine runs on the development machines, so the image is never built in the test
command; a crate left out of the context, or a context that cargo cannot load, would only show in the
release workflow. scripts/check-image-context.sh loads the tree written here with cargo, locked and
offline, which is the first thing the image build does.

    python3 scripts/image_context.py DOCKERFILE OUT_DIR

Reproduced: .dockerignore patterns as BuildKit reads them (`*`, `?`, `[...]`, `**`, `!` exceptions,
the last matching pattern wins, a directory pattern excludes what is under it), the COPY forms
`COPY SRC... DEST` and `COPY ["SRC", ..., "DEST"]` with globs in SRC, relative DEST against WORKDIR,
and only the stage that runs `cargo build` (a COPY --from copies from another stage, not the context).
Not reproduced: ADD, heredocs, build arguments inside COPY paths (refused with a clear line).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import PurePosixPath


def fail(message: str) -> None:
    print(f"image-context: {message}", file=sys.stderr)
    sys.exit(1)


def ignore_file(dockerfile: str) -> str | None:
    """BuildKit reads <Dockerfile>.dockerignore before the context's .dockerignore."""
    for candidate in (dockerfile + ".dockerignore", ".dockerignore"):
        if os.path.isfile(candidate):
            return candidate
    return None


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as an anchored regular expression."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif c == "*":
            out, i = out + "[^/]*", i + 1
        elif c == "?":
            out, i = out + "[^/]", i + 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                fail(f"unterminated [ in .dockerignore pattern {pattern!r}")
            out, i = out + "[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]", end + 1
        elif c == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
        else:
            out, i = out + re.escape(c), i + 1
    return re.compile(out + r"\Z")


def read_ignores(path: str | None) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    if path is None:
        return rules
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:].strip() if negated else line
            cleaned = os.path.normpath(line.lstrip("/")).replace(os.sep, "/")
            rules.append((negated, pattern_regex(cleaned)))
    return rules


def excluded(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """The last pattern matching the path, or one of its parent directories, decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for negated, regex in rules:
        if any(regex.match(p) for p in prefixes):
            verdict = not negated
    return verdict


def context_files(rules) -> list[str]:
    """The repository's tracked files (what a CI checkout holds) minus the ignored ones."""
    listed = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout
    files = [f for f in listed.decode().split("\0") if f and os.path.exists(f)]
    return [f for f in files if not excluded(f, rules)]


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    with open(dockerfile, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            full = (pending + line).strip()
            pending = ""
            if full:
                word, _, rest = full.partition(" ")
                out.append((word.upper(), rest.strip()))
    return out


def build_stage(dockerfile: str) -> list[tuple[str, str]]:
    """The instructions of the stage that runs `cargo build`."""
    stages, current = [], []
    for ins in instructions(dockerfile):
        if ins[0] == "FROM" and current:
            stages.append(current)
            current = []
        current.append(ins)
    stages.append(current)
    for stage in stages:
        if any(word == "RUN" and "cargo build" in args for word, args in stage):
            return stage
    fail(f"{dockerfile}: no stage runs `cargo build`")
    return []


def copy_args(args: str) -> tuple[list[str], str] | None:
    """Sources and destination of a COPY from the context; None for COPY --from."""
    words = args.split()
    flags = [w for w in words if w.startswith("--")]
    if any(flag.startswith("--from") for flag in flags):
        return None
    rest = args
    for flag in flags:
        rest = rest.replace(flag, "", 1)
    rest = rest.strip()
    paths = json.loads(rest) if rest.startswith("[") else rest.split()
    if len(paths) < 2:
        fail(f"COPY {args}: needs a source and a destination")
    if any("$" in p for p in paths):
        fail(f"COPY {args}: build arguments in COPY paths are not reproduced here")
    return paths[:-1], paths[-1]


def place(files: list[str], sources: list[str], dest: str, workdir: str, out: str) -> int:
    """Copies what `COPY sources dest` takes from the context into out (as the image root)."""
    dest_abs = dest if dest.startswith("/") else str(PurePosixPath(workdir) / dest)
    into_dir = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
    copied = 0
    for source in sources:
        src = os.path.normpath(source).replace(os.sep, "/")
        src_rx = pattern_regex(src)
        matched = False
        for f in files:
            parts = f.split("/")
            if src == ".":
                target = str(PurePosixPath(dest_abs) / f)
            else:
                hit = next((n for n in range(len(parts)) if src_rx.match("/".join(parts[: n + 1]))), None)
                if hit is None:
                    continue
                if hit < len(parts) - 1:
                    # A directory gives its contents.
                    target = str(PurePosixPath(dest_abs) / "/".join(parts[hit + 1 :]))
                else:
                    target = str(PurePosixPath(dest_abs) / parts[-1]) if into_dir else dest_abs
            copy_file(f, out, target)
            matched, copied = True, copied + 1
        if not matched:
            fail(f"COPY {source} {dest}: nothing in the build context matches {source!r} (ignored or missing)")
    return copied


def copy_file(src: str, out: str, target: str) -> None:
    path = os.path.join(out, target.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copy2(src, path)


def main() -> None:
    if len(sys.argv) != 3:
        fail("usage: image_context.py DOCKERFILE OUT_DIR")
    dockerfile, out = sys.argv[1], sys.argv[2]
    rules = read_ignores(ignore_file(dockerfile))
    files = context_files(rules)
    workdir, copied = "/", 0
    for word, args in build_stage(dockerfile):
        if word == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / args)
        elif word == "ADD":
            fail(f"ADD {args}: not reproduced; use COPY")
        elif word == "COPY":
            parsed = copy_args(args)
            if parsed is not None:
                copied += place(files, parsed[0], parsed[1], workdir, out)
    print(f"{workdir}\t{copied}")


if __name__ == "__main__":
    main()
