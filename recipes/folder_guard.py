"""The one rule for a folder the recipe deletes or empties: only one it made itself.

A command that clears a folder a knob names (WORK_DIR, OUTPUT_DIR, TRACE_SPOOL, CACHES, ...) asks here first. The
folder is emptied only when it is new, empty, or carries the marker file (`MARKER`) that the same command wrote
into it when it made it; `/`, the home folder, the recipe's checkout (and any folder holding one of them) and
relative paths are refused whatever they hold, and so is a folder, or a marker, of another user's. The folder is
opened once and judged and emptied from that descriptor (recipes/private_files.py): another user who swaps it for a
link to somewhere else between the check and the delete swaps nothing the command sees, and no link is followed
while emptying. A refusal is one line saying why and what to do; nothing is touched.
Shell scripts call this module (`python -m recipes.folder_guard clear|claim ...`), never a second copy of the rule.

    python -m recipes.folder_guard clear --made-by smoke_cpu --knob OUTPUT_DIR /tmp/gsm8k_cpu_smoke/outputs
    python -m recipes.folder_guard claim --made-by smoke_cpu --knob WORK_DIR /tmp/gsm8k_cpu_smoke
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.private_files import Folder

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


def _identities() -> dict[tuple[int, int], tuple[Path, str, bool]]:
    """(device, inode) of each protected folder and of every folder above it: what to call it, and whether it is
    the protected folder itself (else a folder holding it)."""
    ids: dict[tuple[int, int], tuple[Path, str, bool]] = {}
    for kept, what in _protected():
        for index, folder in enumerate([kept, *kept.parents]):
            try:
                info = os.stat(folder)
            except OSError:
                continue
            ids.setdefault((info.st_dev, info.st_ino), (kept, what, index == 0))
    return ids


def _open(path: str | os.PathLike, maker: str, knob: str, create: bool) -> tuple[Folder | None, Path, str]:
    """The folder `path` names, opened once (its links followed once, as the user gave it), or None when it does not
    exist; its resolved path (for messages and the caller), and how to name it in a refusal."""
    raw = os.fspath(path)
    said = f"{knob}={raw}" if knob != "the folder" else raw
    if not raw.strip():
        raise FolderRefused(f"{knob} is empty: give an absolute path to a folder of its own")
    if not os.path.isabs(raw):
        raise FolderRefused(f"{said} is a relative path, and {maker} empties it: give an absolute path to a "
                            "folder of its own, e.g. /tmp/<name>")
    if create and not os.path.lexists(raw):
        os.makedirs(raw, exist_ok=True)
    try:
        fd = os.open(raw, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, Path(os.path.abspath(raw)), said
    except NotADirectoryError:
        raise FolderRefused(f"{said} is a file, not a folder: give {maker} a folder of its own") from None
    resolved = _path_of(fd, raw)
    return Folder(fd, resolved), resolved, said


def _path_of(fd: int, raw: str) -> Path:
    """Where the folder open on `fd` is (the kernel's name for it, not a second walk of `raw`)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: the name as given
        return Path(os.path.abspath(raw))


def _opened(path: str | os.PathLike, maker: str, knob: str) -> tuple[Folder, Path, str]:
    folder, resolved, said = _open(path, maker, knob, create=True)
    if folder is None:
        raise FolderRefused(f"{said} is a link to a folder that does not exist: give {maker} a folder of its own")
    return folder, resolved, said


def _judge(folder: Folder, maker: str, said: str) -> None:
    """FolderRefused unless `maker` may empty the open `folder`: not protected, this user's, and empty or marked by
    `maker` with a marker of this user's."""
    info = os.fstat(folder.fd)
    protected = _identities().get((info.st_dev, info.st_ino))
    if protected is not None:
        kept, what, itself = protected
        where = "is" if itself else f"holds {kept}, which is"
        raise FolderRefused(f"{said} {where} {what}, and {maker} empties it: give it a folder of its own, "
                            "e.g. /tmp/<name>")
    if info.st_uid != os.geteuid():
        raise FolderRefused(f"{said} belongs to another user (uid {info.st_uid}), and {maker} empties it: give it a "
                            "folder of your own")
    names = folder.names()
    if not names:
        return
    made_by = _maker_in(folder)
    if made_by == maker:
        return
    if made_by is None and MARKER in names:
        raise FolderRefused(f"{said} has a {MARKER} marker that is not a file of yours (another user's, or a link), "
                            f"and {maker} empties it: give it a folder of its own")
    if made_by is None:
        raise FolderRefused(f"{said} holds files {maker} did not make (no {MARKER} marker in it), and {maker} "
                            "empties it: give it a new or empty folder, or delete this one yourself if nothing in "
                            "it is needed")
    raise FolderRefused(f"{said} was made by {made_by}, not {maker}, which empties it: give {maker} a folder of "
                        f"its own, or delete this one yourself if nothing in it is needed")


def _maker_in(folder: Folder) -> str | None:
    text = folder.read_own(MARKER)
    if text is None:
        return None
    return text[:200].decode(errors="replace").split("\n", 1)[0].strip() or None


def maker_of(folder: str | os.PathLike) -> str | None:
    """The command that made `folder`, from its marker; None if it has none (a link, or another user's file, does
    not count)."""
    try:
        with Folder.open(folder) as opened:
            return _maker_in(opened)
    except OSError:
        return None


def checked(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder `path` names, resolved, if `maker` may empty it; else FolderRefused with why and what to do."""
    folder, resolved, said = _open(path, maker, knob, create=False)
    if folder is not None:
        with folder:
            _judge(folder, maker, said)
    return resolved


def mark(folder: str | os.PathLike, maker: str) -> None:
    """Write the marker: `maker` made this folder and may empty it when run again."""
    with Folder.open(folder) as opened:
        _mark(opened, maker)


def _mark(folder: Folder, maker: str) -> None:
    folder.write(MARKER, _MARKER_TEXT.format(maker=maker), mode=0o644)


def claim(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder made (or taken, if empty or already `maker`'s) and marked; nothing in it is removed."""
    folder, resolved, said = _opened(path, maker, knob)
    with folder:
        _judge(folder, maker, said)
        if _maker_in(folder) != maker:
            _mark(folder, maker)
    return resolved


def clear(path: str | os.PathLike, maker: str, knob: str = "the folder") -> Path:
    """The folder emptied (made if absent) and marked as `maker`'s: FolderRefused, with nothing touched, unless
    it is new, empty or `maker`'s. Everything is reached from the folder's descriptor, opened once: a folder
    swapped in under its name meanwhile is not the one emptied, and no link is followed."""
    folder, resolved, said = _opened(path, maker, knob)
    with folder:
        _judge(folder, maker, said)
        others = [name for name in folder.names() if folder.stat(name).st_uid != os.geteuid()]
        if others:
            raise FolderRefused(f"{said} holds {others[0]!r}, which another user put there, and {maker} empties it: "
                                "give it a folder only you can write, or delete what is in it yourself")
        if _maker_in(folder) != maker:
            _mark(folder, maker)
        _empty(folder)
    return resolved


def _empty(folder: Folder) -> None:
    for name in folder.names():
        if name != MARKER:
            folder.remove_tree(name)


def remove(path: str | os.PathLike, maker: str, knob: str = "the folder") -> None:
    """The folder deleted, itself included, if it is absent, empty or `maker`'s (else FolderRefused): for a folder
    that is replaced whole by one built beside it (which the builder marks before it takes the name). Its contents
    go from its own descriptor; the folder itself is removed from its parent's only when empty."""
    folder, resolved, said = _open(path, maker, knob, create=False)
    if folder is None:
        return
    with folder:
        _judge(folder, maker, said)
        for name in folder.names():
            folder.remove_tree(name)
    with Folder.open(resolved.parent) as parent:
        try:
            os.rmdir(resolved.name, dir_fd=parent.fd)  # an empty folder only: whatever took the name meanwhile
        except FileNotFoundError:
            pass


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
