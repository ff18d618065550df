"""The relay's durable store: every trace write, appended and fsynced before the client hears 200.

    DIR/segments/00000001.spool   records in arrival order: one JSON header line, then `length` body bytes, "\\n"
    DIR/checkpoint.json           how far W&B has confirmed (segment, offset), and how many records that is
    DIR/lock                      held (flock) by the one process that may send from this spool

Fully sent segments are deleted. A record torn by a crash mid-append was never answered, so the client still
held it; reading stops there. An append that fails part-way (a full disk, a file size limit) is cut back to the last
whole record before the client hears 503 (it sends the record again), and a disk with less than `min_free_bytes` free
takes no new record: whatever was acknowledged stays readable. The directory can be copied to another machine and
sent from there.

Private to its user, whatever the umask: the folders 0700, every file 0600 (traces hold prompts and answers). The
relay sends what a spool holds with its owner's W&B key, so a spool is only ever a trusted folder
(recipes/private_files.py): it and every folder above it belong to this user or root and no one else can write them
(a sticky /var/tmp above aside). Its files are reached from the folder's descriptor, never by path again, and never
through a link: another user can neither plant a record in it nor swap it for a folder of theirs while a relay runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from recipes.private_files import Folder
from recipes.trace_relay.limits import MIN_FREE_BYTES

SEGMENT_BYTES = 64 * 1024 * 1024
UPLOAD_COMMAND = "gsm8k-upload-traces"  # what sends a spool to W&B (pyproject.toml's [project.scripts])


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


class Spool:
    """`root`: a trusted folder (made 0700 with its missing parents); Untrusted, one line, for any other."""

    def __init__(self, root: str | os.PathLike, segment_bytes: int = SEGMENT_BYTES,
                 min_free_bytes: int = MIN_FREE_BYTES) -> None:
        self.root = Path(root)
        self.folder = Folder.trusted(self.root, create=True, what="the trace spool")
        try:
            self.segments = self.folder.folder("segments", create=True)
        except BaseException:
            self.folder.close()
            raise
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

    @property
    def segments_dir(self) -> Path:
        return self.root / "segments"

    # --- ownership ---------------------------------------------------------------------------------
    def acquire(self, wait_s: float = 0.0) -> Spool:
        """Become the one process that appends to and sends from this spool, waiting up to `wait_s` for one that
        is exiting (a relay being replaced) to let go of it. Every file must be a plain file of this user's (made
        0600 if an older spool's is not)."""
        for folder in (self.folder, self.segments):
            for name in folder.names():
                if not name.startswith(".") and name != "segments":
                    os.close(folder.open_file(name, os.O_RDWR, create=False))  # Untrusted: a link, another's
        handle = os.fdopen(self.folder.open_file("lock", os.O_RDWR | os.O_APPEND), "a+")
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
        name = self._segment_name(self._segment)
        try:
            fd = self.segments.open_file(name, os.O_RDWR, create=False)
        except FileNotFoundError:
            return
        try:
            start = Position(self._segment, self.sent_position.offset if self._segment == self.sent_position.segment
                             else 0)
            end = start.offset
            for record in self._scan(start, with_bodies=False):
                if record.end.segment == self._segment:
                    end = record.end.offset
            if os.fstat(fd).st_size > end:
                os.ftruncate(fd, end)
                os.fsync(fd)
        finally:
            os.close(fd)

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
        self.segments.close()
        self.folder.close()

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
        info = os.fstatvfs(self.segments.fd)
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
            name = self._segment_name(self._segment)
            new = name not in self.segments.names()
            self._writer = self.segments.open_file(name, os.O_WRONLY | os.O_APPEND)
            if new:  # make the new file's directory entry durable too
                self.segments.fsync()
        return self._writer

    def keep_rejected(self, record: Record) -> None:
        """Set a record W&B will never take beside the spool (rejected.spool), durably."""
        fd = self.folder.open_file("rejected.spool", os.O_WRONLY | os.O_APPEND)
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
            self.folder.write("checkpoint.json", json.dumps({
                "segment": self.sent_position.segment, "offset": self.sent_position.offset, "sent": self.sent_count,
                "sent_bytes": self.sent_bytes}))
            for number in self._segment_numbers():
                if number < self.sent_position.segment:
                    self.segments.unlink(self._segment_name(number))

    def _scan(self, start: Position, with_bodies: bool):
        for number in self._segment_numbers():
            if number < start.segment:
                continue
            offset = start.offset if number == start.segment else 0
            try:
                fd = self.segments.open_file(self._segment_name(number), os.O_RDONLY, create=False)
            except FileNotFoundError:  # sent and deleted meanwhile
                continue
            with os.fdopen(fd, "rb") as handle:
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
    @staticmethod
    def _segment_name(number: int) -> str:
        return f"{number:08d}.spool"

    def _segment_numbers(self) -> list[int]:
        return sorted(int(name[:-6]) for name in self.segments.names()
                      if name.endswith(".spool") and name[:-6].isdigit())

    def _read_checkpoint(self) -> dict:
        kept = self.read_json("checkpoint.json")
        return kept if kept is not None else {"segment": 1, "offset": 0, "sent": 0}

    def read_json(self, name: str) -> dict | None:
        data = self.folder.read_own(name)
        try:
            return json.loads(data) if data is not None else None
        except ValueError:
            return None

    def write_json(self, name: str, value: dict) -> None:
        self.folder.write(name, json.dumps(value))


def rejected_count(root: str | os.PathLike) -> int:
    """Records W&B refused for good, kept in ROOT/rejected.spool (one header line, the body, a newline each)."""
    try:
        with Folder.trusted(root, what="the trace spool") as folder:
            data = folder.read_own("rejected.spool") or b""
    except FileNotFoundError:
        return 0
    count, offset = 0, 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        try:
            length = json.loads(data[offset:end])["length"]
        except (ValueError, KeyError):
            break
        offset = end + 1 + length + 1
        count += 1
    return count
