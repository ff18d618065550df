"""The relay's durable store: every trace write, appended and fsynced before the client hears 200.

    DIR/segments/00000001.spool   records in arrival order: one JSON header line, then `length` body bytes, "\\n"
    DIR/checkpoint.json           how far W&B has confirmed (segment, offset), and how many records that is
    DIR/lock                      held (flock) by the one process that may send from this spool

Fully sent segments are deleted. A record torn by a crash mid-append was never answered, so the client still
held it; reading stops there. An append that fails part-way (a full disk, a file size limit) is cut back to the last
whole record before the client hears 503 (it sends the record again), and a disk with less than `min_free_bytes` free
takes no new record: whatever was acknowledged stays readable. The directory can be copied to another machine and
sent from there.

Private to its user, whatever the umask: the folders 0700, every file 0600 (traces hold prompts and answers). A spool
folder that exists but belongs to another user, or is a symbolic link, is refused (a shared /var/tmp).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from recipes.trace_relay.limits import MIN_FREE_BYTES

SEGMENT_BYTES = 64 * 1024 * 1024
UPLOAD_COMMAND = "gsm8k-upload-traces"  # what sends a spool to W&B (pyproject.toml's [project.scripts])
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


@dataclass(frozen=True, order=True)
class Position:
    segment: int
    offset: int


@dataclass
class Record:
    route: str
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)  # what W&B should see besides auth
    project_id: str | None = None
    digest: str | None = None  # computed by the relay when it answered
    row_digests: list[str] = field(default_factory=list)
    end: Position | None = None  # where the next record starts

    def header_line(self) -> bytes:
        header = {"route": self.route, "content_type": self.content_type, "headers": self.headers,
                  "project_id": self.project_id, "digest": self.digest, "row_digests": self.row_digests,
                  "length": len(self.body)}
        return json.dumps(header).encode() + b"\n"


@dataclass
class Summary:
    """What a relay sent and left in its spool when it stopped, as one line that says how to send the rest."""

    sent: int
    pending: int
    rejected: int
    error: str | None = None
    sent_bytes: int = 0  # the request bodies W&B accepted: the trace data it counts

    def line(self, spool_dir) -> str:
        size = f" ({self.sent_bytes / 1e6:.2f} MB)" if self.sent_bytes else ""
        text = f"{self.sent} trace records sent to W&B{size}, {self.pending} pending"
        if self.rejected:
            text += f", {self.rejected} rejected by W&B (kept in {spool_dir}/rejected.spool)"
        if self.pending:
            text += f" in {spool_dir}: send them with `{UPLOAD_COMMAND} --spool {spool_dir}`"
            if self.error:
                text += f" (last error: {self.error})"
        return text


class SpoolBusy(RuntimeError):
    pass


class SpoolRefused(OSError):
    """A record the spool did not keep (disk under its floor, a failed write rolled back): answer 503, the client
    sends it again."""


def private_dir(path: Path) -> Path:
    """`path` as a folder of this user's only (created if missing, parents as usual); OSError if it is someone
    else's or a symbolic link."""
    path.mkdir(parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{path} is not a folder of this user's (a link, or another user's): choose another "
                              "TRACE_SPOOL")
    if stat.S_IMODE(info.st_mode) != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)
    return path


def open_private(path: Path, flags: int) -> int:
    """A file descriptor on `path`, created 0600 whatever the umask (an existing file made 0600 too)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


class Spool:
    def __init__(self, root: str | os.PathLike, segment_bytes: int = SEGMENT_BYTES,
                 min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.root = Path(root)
        self.segments_dir = self.root / "segments"
        if not self.segments_dir.is_dir():
            private_dir(self.root)
            private_dir(self.segments_dir)
        self.segment_bytes = segment_bytes
        self.min_free_bytes = min_free_bytes
        self._lock = threading.Lock()
        self._lock_file = None
        checkpoint = self._read_checkpoint()
        self.sent_position = Position(checkpoint["segment"], checkpoint["offset"])
        self.sent_count = checkpoint["sent"]
        self.sent_bytes = checkpoint.get("sent_bytes", 0)  # kept with the count: a spool outlives its relays
        self.pending_count = sum(1 for _ in self._scan(self.sent_position, with_bodies=False))
        segments = self._segment_numbers()
        self._segment = segments[-1] if segments else max(1, self.sent_position.segment)
        self._writer: int | None = None  # the segment being appended to (a file descriptor)
        self._torn_at: int | None = None  # where a failed append must be cut back to, if cutting failed too

    # --- ownership ---------------------------------------------------------------------------------
    def acquire(self, wait_s: float = 0.0) -> Spool:
        """Become the one process that appends to and sends from this spool, waiting up to `wait_s` for one that
        is exiting (a relay being replaced) to let go of it. Makes the spool private (an older one may not be)."""
        private_dir(self.root)
        private_dir(self.segments_dir)
        for path in [*self.root.iterdir(), *self.segments_dir.iterdir()]:
            if path.is_file() and not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) != PRIVATE_FILE:
                os.chmod(path, PRIVATE_FILE)
        handle = os.fdopen(open_private(self.root / "lock", os.O_RDWR | os.O_APPEND), "a+")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                raise SpoolBusy(f"{self.root} is in use by {holder}: stop it first (it sends these traces itself)"
                                ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._lock_file = handle
        self._cut_torn_tail()
        return self

    def _cut_torn_tail(self) -> None:
        """Drop the bytes of a record torn by a crash (never acknowledged), so appends continue after the last
        whole record instead of behind an unreadable one."""
        path = self._segment_path(self._segment)
        if not path.exists():
            return
        start = Position(self._segment, self.sent_position.offset if self._segment == self.sent_position.segment
                         else 0)
        end = start.offset
        for record in self._scan(start, with_bodies=False):
            if record.end.segment == self._segment:
                end = record.end.offset
        if path.stat().st_size > end:
            with open(path, "r+b") as handle:
                handle.truncate(end)
                os.fsync(handle.fileno())

    def close(self) -> None:
        with self._lock:
            if self._torn_at is not None:
                try:
                    self._cut_back()
                except SpoolRefused:
                    pass  # cut at the next acquire (_cut_torn_tail)
            if self._writer is not None:
                os.close(self._writer)
                self._writer = None
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None

    # --- writing -----------------------------------------------------------------------------------
    def append(self, record: Record) -> None:
        """Durable when this returns (fsync), so the caller may answer 200. SpoolRefused when the record was not
        kept (the disk under its floor, or a write that failed and was cut back): the caller answers 503."""
        data = record.header_line() + record.body + b"\n"
        with self._lock:
            self._check_room(len(data))
            writer = self._open_writer()
            start = os.lseek(writer, 0, os.SEEK_END)
            if start > 0 and start + len(data) > self.segment_bytes:
                os.close(writer)
                self._segment += 1
                self._writer = None
                writer, start = self._open_writer(), 0
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(writer, view):]
                os.fsync(writer)
            except OSError as err:
                self._torn_at = start
                self._cut_back()
                raise SpoolRefused(f"trace spool {self.root}: a write failed and was rolled back ({err}); the "
                                   "client sends the record again") from err
            self.pending_count += 1

    def _check_room(self, size: int) -> None:
        if self._torn_at is not None:  # a failed append still to cut back: nothing goes after it before that
            self._cut_back()
        info = os.statvfs(self.segments_dir)
        free = info.f_bavail * info.f_frsize
        if free - size < self.min_free_bytes:
            raise SpoolRefused(f"trace spool {self.root}: {free / 1e9:.2f} GB free, under the "
                               f"{self.min_free_bytes / 1e9:.2f} GB floor: no new record until there is room")

    def _cut_back(self) -> None:
        """Truncate the segment to where the failed append started; if even that fails, the next append tries again
        first (and is refused meanwhile), so no record is ever acknowledged behind an unreadable one."""
        try:
            os.ftruncate(self._writer, self._torn_at)
            os.fsync(self._writer)
        except OSError as err:
            raise SpoolRefused(f"trace spool {self.root}: cannot roll back a failed write yet ({err})") from err
        self._torn_at = None

    def _open_writer(self) -> int:
        if self._writer is None:
            path = self._segment_path(self._segment)
            new = not path.exists()
            self._writer = open_private(path, os.O_WRONLY | os.O_APPEND)
            if new:  # make the new file's directory entry durable too
                dir_fd = os.open(self.segments_dir, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        return self._writer

    def keep_rejected(self, record: Record) -> None:
        """Set a record W&B will never take beside the spool (rejected.spool), durably."""
        fd = open_private(self.root / "rejected.spool", os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "ab") as handle:
            handle.write(record.header_line() + record.body + b"\n")
            handle.flush()
            os.fsync(handle.fileno())

    # --- reading and confirming --------------------------------------------------------------------
    def pending(self, limit: int | None = None) -> list[Record]:
        """The oldest unsent records, in order (at most `limit`)."""
        records = []
        for record in self.iter_pending():
            if limit is not None and len(records) >= limit:
                break
            records.append(record)
        return records

    def iter_pending(self):
        """Unsent records in order, read as they are consumed."""
        return self._scan(self.sent_position, with_bodies=True)

    def iter_newest_segment(self):
        """The records of the segment being appended to, sent or not, in order: what a relay that takes the spool
        over may see again from a client whose request the previous relay kept but never answered."""
        return self._scan(Position(self._segment, 0), with_bodies=True)

    def mark_sent(self, records: list[Record], sent_bytes: int = 0) -> None:
        """`records` are done with (sent, or set aside); `sent_bytes`: the bytes W&B accepted for them."""
        if not records:
            return
        with self._lock:
            self.sent_position = records[-1].end
            self.sent_count += len(records)
            self.sent_bytes += sent_bytes
            self.pending_count -= len(records)
            _write_json_atomically(self.root / "checkpoint.json", {
                "segment": self.sent_position.segment, "offset": self.sent_position.offset, "sent": self.sent_count,
                "sent_bytes": self.sent_bytes})
            for number in self._segment_numbers():
                if number < self.sent_position.segment:
                    self._segment_path(number).unlink(missing_ok=True)

    def _scan(self, start: Position, with_bodies: bool):
        for number in self._segment_numbers():
            if number < start.segment:
                continue
            offset = start.offset if number == start.segment else 0
            path = self._segment_path(number)
            with open(path, "rb") as handle:
                handle.seek(offset)
                while True:
                    line = handle.readline()
                    if not line.endswith(b"\n"):
                        break  # end, or a header torn by a crash
                    try:
                        header = json.loads(line)
                    except ValueError:
                        break
                    length = header.pop("length")
                    if with_bodies:
                        body = handle.read(length)
                        if len(body) < length:
                            break
                    else:
                        body = b""
                        handle.seek(length, os.SEEK_CUR)
                    if handle.read(1) != b"\n":
                        break
                    yield Record(body=body, end=Position(number, handle.tell()), **header)

    # --- files ------------------------------------------------------------------------------------
    def _segment_path(self, number: int) -> Path:
        return self.segments_dir / f"{number:08d}.spool"

    def _segment_numbers(self) -> list[int]:
        return sorted(int(p.stem) for p in self.segments_dir.glob("*.spool") if p.stem.isdigit())

    def _read_checkpoint(self) -> dict:
        path = self.root / "checkpoint.json"
        if path.is_file():
            return json.loads(path.read_text())
        return {"segment": 1, "offset": 0, "sent": 0}

    def read_json(self, name: str) -> dict | None:
        path = self.root / name
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except ValueError:
            return None

    def write_json(self, name: str, value: dict) -> None:
        _write_json_atomically(self.root / name, value)


def _write_json_atomically(path: Path, value: dict) -> None:
    # a temporary file of this thread's own: the relay's request threads remember W&B's answers at the same time
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w") as handle:
        json.dump(value, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def rejected_count(root: str | os.PathLike) -> int:
    """Records W&B refused for good, kept in ROOT/rejected.spool (one header line, the body, a newline each)."""
    path = Path(root) / "rejected.spool"
    count = 0
    if path.is_file():
        with open(path, "rb") as handle:
            while line := handle.readline():
                try:
                    length = json.loads(line)["length"]
                except (ValueError, KeyError):
                    break
                handle.seek(length + 1, os.SEEK_CUR)
                count += 1
    return count
