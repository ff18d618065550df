"""The one rule for a folder the recipe deletes or empties: only one it made itself.

A command that clears a folder a knob names (WORK_DIR, OUTPUT_DIR, TRACE_SPOOL, CACHES, ...) asks here first. The
folder is emptied only when it is new, empty, or carries the marker file (`MARKER`) that the same command wrote
into it when it made it; `/`, the home folder, the recipe's checkout (and any folder holding one of them) and
relative paths are refused whatever they hold. A refusal is one line saying why and what to do; nothing is touched.
Shell scripts call this module (`python -m recipes.folder_guard clear|claim ...`), never a second copy of the rule.

    python -m recipes.folder_guard clear --made-by smoke_cpu --knob OUTPUT_DIR /tmp/gsm8k_cpu_smoke/outputs
    python -m recipes.folder_guard claim --made-by smoke_cpu --knob WORK_DIR /tmp/gsm8k_cpu_smoke
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import sys
from pathlib import Path

from recipes.constants import REPO_ROOT

MARKER = ".made-by-gsm8k-recipe"  # its first line: the command that made the folder (and may empty it)
_MARKER_TEXT = ("{maker}\nThis folder was made by the GSM8K recipe's {maker}, which empties it when run again with "
                "the same folder. Delete this file to keep the folder from being emptied.\n")


class FolderRefused(ValueError):
    """A folder the recipe will not empty or delete; the message is the one line the user sees."""


def _homes() -> set[Path]:
    homes = {Path(os.path.realpath(Path.home()))}
    try:
        homes.add(Path(os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)))
    except KeyError:  # a uid without a passwd entry (some containers): $HOME is all there is
        pass
    return homes


def _protected() -> list[tuple[Path, str]]:
    """Folders never emptied, nor any folder holding one of them, with what to call them."""
    return ([(Path("/"), "the root of the file system")] + [(home, "your home folder") for home in _homes()]
            + [(Path(os.path.realpath(REPO_ROOT)), "the recipe's checkout")])


def maker_of(folder: Path) -> str | None:
    """The command that made `folder`, from its marker; None if it has none (a symlink does not count)."""
    marker = folder / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        with marker.open(errors="replace") as f:
            return f.readline(200).strip() or None
    except OSError:
        return None


def checked(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder `path` names, resolved, if `maker` may empty it; else FolderRefused with why and what to do."""
    raw = os.fspath(path)
    said = f"{knob}={raw}" if knob != "the folder" else raw
    if not raw.strip():
        raise FolderRefused(f"{knob} is empty: give an absolute path to a folder of its own")
    if not os.path.isabs(raw):
        raise FolderRefused(f"{said} is a relative path, and {maker} empties it: give an absolute path to a "
                            "folder of its own, e.g. /tmp/<name>")
    folder = Path(os.path.realpath(raw))
    for kept, what in _protected():
        if folder == kept or folder in kept.parents:
            where = "is" if folder == kept else f"holds {kept}, which is"
            raise FolderRefused(f"{said} {where} {what}, and {maker} empties it: give it a folder of its own, "
                                "e.g. /tmp/<name>")
    if folder.exists() and not folder.is_dir():
        raise FolderRefused(f"{said} is a file, not a folder: give {maker} a folder of its own")
    if not folder.exists() or not any(folder.iterdir()):
        return folder
    made_by = maker_of(folder)
    if made_by == maker:
        return folder
    if made_by is None:
        raise FolderRefused(f"{said} holds files {maker} did not make (no {MARKER} marker in it), and {maker} "
                            "empties it: give it a new or empty folder, or delete this one yourself if nothing in "
                            "it is needed")
    raise FolderRefused(f"{said} was made by {made_by}, not {maker}, which empties it: give {maker} a folder of "
                        f"its own, or delete this one yourself if nothing in it is needed")


def mark(folder: Path, maker: str) -> None:
    """Write the marker: `maker` made this folder and may empty it when run again."""
    marker = folder / MARKER
    tmp = folder / f"{MARKER}.tmp"
    tmp.write_text(_MARKER_TEXT.format(maker=maker))
    os.replace(tmp, marker)


def claim(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder made (or taken, if empty or already `maker`'s) and marked; nothing in it is removed."""
    folder = checked(path, maker, knob)
    folder.mkdir(parents=True, exist_ok=True)
    if maker_of(folder) != maker:
        mark(folder, maker)
    return folder


def clear(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder emptied (made if absent) and marked as `maker`'s: FolderRefused, with nothing touched, unless
    it is new, empty or `maker`'s."""
    folder = claim(path, maker, knob)
    for entry in folder.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return folder


def remove(path: str | os.PathLike, maker: str, knob: str = "the folder") -> None:
    """The folder deleted, itself included, if it is absent, empty or `maker`'s (else FolderRefused): for a folder
    that is replaced whole by one built beside it (which the builder marks before it takes the name)."""
    folder = checked(path, maker, knob)
    if folder.is_dir():
        shutil.rmtree(folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("clear", "claim", "check"),
                   help="clear: empty it (made if absent); claim: make and mark it, removing nothing; check: only "
                        "say whether it may be emptied")
    p.add_argument("folder")
    p.add_argument("--made-by", required=True, help="the command that makes and empties the folder")
    p.add_argument("--knob", default="the folder", help="the knob that named it, for the message")
    args = p.parse_args(argv)
    action = {"clear": clear, "claim": claim, "check": checked}[args.action]
    try:
        action(args.folder, args.made_by, args.knob)
    except FolderRefused as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: could not {args.action} {args.knob}={args.folder}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
