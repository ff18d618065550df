"""Record measured figures in docs/measured.md, the one page that holds them (the other pages link to its rows).

    python scripts/bench_calculator.py | python scripts/record_measured.py
    python scripts/bench_ci.py | python scripts/record_measured.py              # CI time on a fresh clone
    echo 'RESULT smoke_cpu_ram_gb=11.5' | python scripts/record_measured.py     # a figure measured by hand
    echo 'RESULT new_figure=3.2' | python scripts/record_measured.py --how "..." --target "..."   # a new row
    echo 'RESULT gpu_figure=1.6' | python scripts/record_measured.py --machine "one H100" --commit abc1234  # elsewhere
    echo 'RESULT figure=4.1' | python scripts/record_measured.py --how "..."     # re-measured another way
    python scripts/record_measured.py --drop old_figure                         # a figure nothing measures now
    python scripts/record_measured.py --reword figure --target "..."            # its words only, not re-measured
    python scripts/record_measured.py --check                                   # the page is as this script writes it

Reads `RESULT name=value [name=value ...]` lines (the last line of every scripts/bench_*.py) from stdin, echoes
its input, and rewrites the named rows' value and "recorded" cells (date, commit, machine); other rows are kept.
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from recipes.constants import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "measured.md"

HEADER = """# Measured figures

Every time, speed, memory and size figure the docs and the scripts cite lives on this page and only here: they link
to its rows (`measured.md#<figure>`) instead of restating them. What runs scored (accuracies) is on the
[results](results.md) page. This page is written by `scripts/record_measured.py`, never by hand: run the command in a
row's "how" column and pipe its output into the script, which takes the `RESULT name=value` lines and rewrites those
rows' value and "recorded" cells. Updating a figure therefore changes this page only.

```bash
python scripts/bench_calculator.py | python scripts/record_measured.py
python scripts/bench_ci.py | python scripts/record_measured.py      # CI time: .ci/run on a fresh clone
```

A value with commas holds one figure per run; `a-b` is the range over runs recorded before the script existed. A
figure holds for the commit in its "recorded" cell (or the one its "how" names); the code may have changed since.
A target is what the recipe is built to stay within; a run over it is recorded as measured.
"""
TABLE_HEAD = "| figure | value | target | how it is measured | recorded |\n|---|---|---|---|---|\n"
ROW = re.compile(r'^\| <a id="(?P<name>\w+)"></a>`(?P=name)` \| (?P<value>[^|]*?) \| (?P<target>[^|]*?) \| '
                 r"(?P<how>[^|]*?) \| (?P<recorded>[^|]*?) \|$")
RESULT = re.compile(r"^RESULT\s+(.*)$")
PAIR = re.compile(r"^(\w+)=(\S+)$")


@dataclass(frozen=True)
class Figure:
    name: str
    value: str
    target: str
    how: str
    recorded: str

    def row(self) -> str:
        return (f'| <a id="{self.name}"></a>`{self.name}` | {self.value} | {self.target} | {self.how} | '
                f"{self.recorded} |")


class PageError(ValueError):
    pass


def read_page(path: Path) -> list[Figure]:
    """The page's rows, in order; any other table line is a hand edit the script would not keep."""
    figures = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("| <a id="):
            continue
        match = ROW.match(line)
        if not match:
            raise PageError(f"{path}:{number}: not a row this script writes: {line[:80]}")
        figures.append(Figure(**match.groupdict()))
    return figures


def render(figures: list[Figure]) -> str:
    return HEADER + "\n" + TABLE_HEAD + "".join(f.row() + "\n" for f in figures)


def parse_results(lines) -> dict[str, str]:
    """{name: value} from every `RESULT ...` line; a malformed pair is an error, not a silent skip."""
    found = {}
    for line in lines:
        match = RESULT.match(line.strip())
        if not match:
            continue
        for pair in match.group(1).split():
            kv = PAIR.match(pair)
            if not kv:
                raise PageError(f"RESULT pair {pair!r} is not name=value (in: {line.strip()})")
            if "|" in kv.group(2):
                raise PageError(f"RESULT value {kv.group(2)!r} holds '|', which would break the table")
            found[kv.group(1)] = kv.group(2)
    return found


def where_recorded(machine: str | None, commit: str | None = None) -> str:
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                      text=True).stdout.strip() or "no git"
    return f"{date} at {commit}, {machine or f'{os.cpu_count()} CPU cores'}"


def record(figures: list[Figure], results: dict[str, str], recorded: str, how: str | None,
           target: str | None) -> list[Figure]:
    known = {f.name for f in figures}
    new = [name for name in results if name not in known]
    if new and not how:
        raise PageError(f"no row for {', '.join(new)} in docs/measured.md: pass --how (and --target) to add it")
    # --how (and --target) given with known figures: they were re-measured another way, and say so
    changes = {"how": how} if how else {}
    if target:
        changes["target"] = target
    updated = [replace(f, value=results[f.name], recorded=recorded, **changes) if f.name in results else f
               for f in figures]
    return updated + [Figure(name, results[name], target or "—", how, recorded) for name in new]


def reword(figures: list[Figure], names: list[str], how: str | None, target: str | None,
           machine: str | None = None) -> list[Figure]:
    """The named rows with a new how and/or target, or the machine their recorded cell names (its words); what was
    measured, and when and at which commit, is kept."""
    unknown = sorted(set(names) - {f.name for f in figures})
    if unknown:
        raise PageError(f"no row for {', '.join(unknown)} to reword")
    changes = {key: value for key, value in (("how", how), ("target", target)) if value}
    if not changes and not machine:
        raise PageError("--reword needs the new --how, --target and/or --machine")

    def reworded(f: Figure) -> Figure:
        recorded = f.recorded
        if machine:
            when, sep, _ = recorded.partition(", ")  # "<date> at <commit>, <machine>"
            recorded = f"{when}{sep or ', '}{machine}"
        return replace(f, **changes, recorded=recorded)

    return [reworded(f) if f.name in names else f for f in figures]


def write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def main(argv: list[str] | None = None, stdin=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--page", type=Path, default=PAGE, help="the measured page (default: %(default)s)")
    p.add_argument("--how", help="the command that measures the figures and on what (needed for a new figure; "
                                 "for a known one it replaces the old text)")
    p.add_argument("--target", help="the figures' target, e.g. '≤ 5 ms'")
    p.add_argument("--drop", action="append", default=[], metavar="NAME",
                   help="remove a figure's row (one that nothing measures any more); repeatable")
    p.add_argument("--reword", action="append", default=[], metavar="NAME",
                   help="rewrite a figure's how and/or target (--how, --target), or the machine its recorded cell "
                        "names (--machine), without re-measuring it: its value, date and commit stay; repeatable")
    p.add_argument("--machine", help="what it ran on (default: this machine's CPU core count)")
    p.add_argument("--commit", help="the commit that was measured, when not this checkout's HEAD (a run elsewhere)")
    p.add_argument("--check", action="store_true", help="only check the page is exactly as this script writes it")
    args = p.parse_args(argv)
    try:
        figures = read_page(args.page)
        if args.check:
            if args.page.read_text() != render(figures):
                print(f"{args.page} differs from what scripts/record_measured.py writes: re-record, do not edit it",
                      file=sys.stderr)
                return 1
            return 0
        if args.drop:
            unknown = sorted(set(args.drop) - {f.name for f in figures})
            if unknown:
                raise PageError(f"no row for {', '.join(unknown)} to drop")
            figures = [f for f in figures if f.name not in args.drop]
            write_atomic(args.page, render(figures))
            print(f"record_measured: dropped {', '.join(args.drop)} -> {args.page}", file=sys.stderr)
            return 0
        if args.reword:
            figures = reword(figures, args.reword, args.how, args.target, args.machine)
            write_atomic(args.page, render(figures))
            print(f"record_measured: reworded {', '.join(args.reword)} -> {args.page}", file=sys.stderr)
            return 0
        lines = list(stdin if stdin is not None else sys.stdin)
        sys.stdout.writelines(lines)
        results = parse_results(lines)
        if not results:
            print("record_measured: no `RESULT name=value` line in the input; nothing recorded", file=sys.stderr)
            return 1
        figures = record(figures, results, where_recorded(args.machine, args.commit), args.how, args.target)
    except (OSError, PageError) as e:
        print(f"record_measured: {e}", file=sys.stderr)
        return 1
    write_atomic(args.page, render(figures))
    print(f"record_measured: {', '.join(f'{k}={v}' for k, v in results.items())} -> {args.page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
