"""Files and folders reached so that another user of the node cannot redirect them.

Another local user may share a folder the recipe writes in (a group-writable OUTPUT_DIR) or make a path first (under
/var/tmp). What they can do there: plant a symbolic link or a hard link where the recipe will write, put a file of
theirs where the recipe reads, or swap a folder for another between the recipe's check and its use. So:

- a folder is opened once, reached from / one name at a time through links of this user or root only, and
  everything in it is reached from that descriptor (`dir_fd`), never by walking its path again; a name inside it is
  opened with O_NOFOLLOW, and a file that is not a plain file of this user's with one link (a link, a FIFO, another
  user's file) is refused;
- a folder whose contents the recipe trusts (a trace spool it sends with the owner's W&B key) is `trusted`: it and
  every folder above it, up to /, belong to this user or root and no one else can write them (a sticky folder such
  as /tmp or /var/tmp above it is fine: no one else can rename or delete what is ours there). Links on the way are
  followed only when they belong to this user or root too;
- files are written whole (a temporary name made with O_EXCL, then renamed in the same folder) and 0600, folders the
  recipe makes are 0700, whatever the umask;
- a tree is deleted from its parent's descriptor without following a link (shutil.rmtree with dir_fd).

Standard library only: recipes/folder_guard.py (run by shell scripts with any Python 3) builds on it.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
MAX_LINKS = 40  # links followed in one walk, as the kernel allows (ELOOP)
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class Untrusted(PermissionError):
    """A path the recipe will not use: the message is one line saying which part and why, and what to do."""


def _owned(info: os.stat_result) -> bool:
    return info.st_uid in (os.geteuid(), 0)


def _open_writable_by_others(info: os.stat_result) -> bool:
    return bool(info.st_mode & _OTHERS_WRITE)


class Folder:
    """An open folder: every name in it is reached from its descriptor. `path` is for messages only."""

    def __init__(self, fd: int, path: str | os.PathLike) -> None:
        self.fd = fd
        self.path = Path(path)

    # --- opening ----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, create: bool = False) -> Folder:
        """The folder at `path`, made with its missing parents if `create`: for a folder whose files the recipe writes
        but never trusts (logs, summaries in OUTPUT_DIR, which others may write). Reached from / one name at a time,
        following only the links of this user or root (a link another user planted on the way is Untrusted)."""
        path = os.path.abspath(os.fspath(path))
        return cls(_walk(path, create, "the folder", strict=False), path)

    @classmethod
    def trusted(cls, path: str | os.PathLike, create: bool = False, what: str = "the folder") -> Folder:
        """The folder at `path` if no one but this user (and root) can change it or anything above it; made 0700
        (with its missing parents) if `create`. Untrusted with one line saying why otherwise."""
        path = os.path.abspath(os.fspath(path))
        fd = _walk(path, create, what)
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid():
                raise Untrusted(f"{what} {path} belongs to another user (uid {info.st_uid}): give a folder of yours")
            if stat.S_IMODE(info.st_mode) != PRIVATE_DIR:
                os.fchmod(fd, PRIVATE_DIR)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def folder(self, name: str, create: bool = False) -> Folder:
        """A folder of this user's inside this one, not writable by others (made 0700 if `create`)."""
        if create:
            try:
                os.mkdir(name, PRIVATE_DIR, dir_fd=self.fd)
            except FileExistsError:
                pass
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=self.fd)  # ELOOP: a link
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or _open_writable_by_others(info):
            os.close(fd)
            raise Untrusted(f"{self.path / name} is not a folder of this user's only (owner uid {info.st_uid}, "
                            f"mode {stat.S_IMODE(info.st_mode):o}): move it away")
        return Folder(fd, self.path / name)

    # --- files ------------------------------------------------------------------------------------------
    def open_file(self, name: str, flags: int, create: bool = True) -> int:
        """A descriptor on the plain file `name` of this user's (made 0600 when absent and `create`; made 0600 when
        opened for writing), never through a link; Untrusted for a link, another user's file, one with other hard
        links, a FIFO or a device."""
        extra = os.O_CREAT if create else 0
        try:
            fd = os.open(name, flags | extra | _NOFOLLOW | os.O_NONBLOCK, PRIVATE_FILE, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise Untrusted(f"{self.path / name} is a symbolic link (someone else's?): the recipe writes no "
                                "file through a link; remove it") from None
            if err.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO no one reads, a folder, opened for writing
                raise Untrusted(f"{self.path / name} is not a plain file (a FIFO, a folder): the recipe does not "
                                "write it; remove it") from None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
                raise Untrusted(f"{self.path / name} is not a plain file of this user's (owner uid {info.st_uid}, "
                                f"{info.st_nlink} link(s)): the recipe does not write it; remove it")
            if flags & (os.O_WRONLY | os.O_RDWR) and stat.S_IMODE(info.st_mode) != PRIVATE_FILE:
                os.fchmod(fd, PRIVATE_FILE)  # a file the recipe writes is private (an older one may not be)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_own(self, name: str) -> bytes | None:
        """What the plain file `name` holds if this user wrote it; None if it is absent, a link or another user's
        (a file planted by someone else says nothing to the recipe)."""
        try:
            fd = self.open_file(name, os.O_RDONLY, create=False)
        except (FileNotFoundError, Untrusted):
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def write(self, name: str, data: bytes | str, mode: int = PRIVATE_FILE) -> None:
        """`name` replaced whole by `data` (a reader sees the old file or the new one), `mode`, fsynced."""
        if isinstance(data, str):
            data = data.encode()
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode, dir_fd=self.fd)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.unlink(tmp)
            raise
        os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)  # a link at `name` is replaced, not followed
        except BaseException:
            self.unlink(tmp)
            raise

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def remove_tree(self, name: str) -> None:
        """`name` deleted with everything in it, from this folder's descriptor, following no link (a link at `name`
        is removed itself)."""
        info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=self.fd)
        else:
            os.unlink(name, dir_fd=self.fd)

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def stat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def why_untrusted(path: str | os.PathLike) -> str | None:
    """Why `path` would not be a trusted folder (Folder.trusted with create), or None when it would be. Only
    looks: makes nothing."""
    try:
        os.close(_walk(os.path.abspath(os.fspath(path)), create=False, what="the folder", missing_ok=True))
    except Untrusted as err:
        return str(err)
    except OSError as err:
        return f"{path}: {err.strerror}"
    return None


def _walk(path: str, create: bool, what: str, missing_ok: bool = False, strict: bool = True) -> int:
    """A descriptor (O_RDONLY) on the folder at absolute `path`, reached from / one name at a time: each link on the
    way must belong to this user or root; `strict` (a trusted folder): each folder on the way too, and be writable by
    no one else (sticky folders above aside). `missing_ok`: stop at the first missing name (the deepest existing
    folder's descriptor), as a check of what `create` would make."""
    stack = [(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), "/")]
    parts = [p for p in path.split("/") if p]
    links = 0
    try:
        if strict:
            _check_folder(os.fstat(stack[0][0]), "/", what, final=not parts)
        while parts:
            name = parts.pop(0)
            fd, where = stack[-1]
            if name == ".":
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                continue
            here = os.path.join(where, name)
            try:
                child = os.open(name, os.O_PATH | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if missing_ok:
                    break
                if not create:
                    raise
                try:
                    os.mkdir(name, PRIVATE_DIR if strict else 0o777, dir_fd=fd)  # else: the umask's, as mkdir -p
                except FileExistsError:
                    pass
                child = os.open(name, os.O_PATH | _NOFOLLOW, dir_fd=fd)
            info = os.fstat(child)
            if stat.S_ISLNK(info.st_mode):
                os.close(child)
                if not _owned(info):
                    raise Untrusted(f"{what} {path}: {here} is a link of another user's (uid {info.st_uid}): give a "
                                    "path without it")
                links += 1
                if links > MAX_LINKS:
                    raise Untrusted(f"{what} {path}: more than {MAX_LINKS} links on the way")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[0])
                parts[:0] = [p for p in target.split("/") if p]
                continue
            stack.append((child, here))
            if not stat.S_ISDIR(info.st_mode):
                raise Untrusted(f"{what} {path}: {here} is not a folder")
            if strict:
                _check_folder(info, here, what, final=not parts)
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=stack[-1][0])
    finally:
        for fd, _ in stack:
            os.close(fd)


def _check_folder(info: os.stat_result, here: str, what: str, final: bool) -> None:
    if not _owned(info):
        raise Untrusted(f"{what}: {here} belongs to another user (uid {info.st_uid}), who can change what is in it: "
                        "give a path of folders of yours (or root's)")
    if _open_writable_by_others(info) and (final or not info.st_mode & stat.S_ISVTX):
        raise Untrusted(f"{what}: {here} can be written by another user (mode {stat.S_IMODE(info.st_mode):o}), who "
                        "could swap what is in it: `chmod go-w` it, or give another path")
