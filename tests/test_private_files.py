"""recipes/private_files.py on real folders: what another user could plant where the recipe writes (a symbolic link,
a hard link, a FIFO, a file of theirs) is refused and never written through; a folder is trusted only when no one
else can change it or anything above it. Files of "another user" are made with chown (root only; skipped else)."""

from __future__ import annotations

import os
import stat

import pytest

from recipes.private_files import Folder, Untrusted, why_untrusted

pytestmark = pytest.mark.unit
NOBODY = 65534


def as_root():
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another uid (chown)")


def test_a_planted_link_fifo_or_hard_link_is_refused_and_nothing_is_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    out = tmp_path / "out"
    out.mkdir()
    (out / "log").symlink_to(victim)
    os.mkfifo(out / "fifo")
    os.link(victim, out / "hard")
    (out / "folder").mkdir()
    with Folder.open(out) as folder:
        for name in ("log", "fifo", "hard", "folder"):
            with pytest.raises(Untrusted) as refused:
                folder.open_file(name, os.O_WRONLY | os.O_APPEND)
            assert "\n" not in str(refused.value)
            assert folder.read_own(name) is None
        folder.write("log", "the run's")  # written whole under its own name: the link is replaced, not followed
    assert victim.read_text() == "victim"
    assert (out / "log").read_text() == "the run's" and not (out / "log").is_symlink()
    assert stat.S_IMODE((out / "log").stat().st_mode) == 0o600


def test_a_file_of_another_user_is_neither_written_nor_read(tmp_path):
    as_root()
    (tmp_path / "stop_request.json").write_text('{"why": "another user"}')
    os.chown(tmp_path / "stop_request.json", NOBODY, NOBODY)
    with Folder.open(tmp_path) as folder:
        assert folder.read_own("stop_request.json") is None
        with pytest.raises(Untrusted, match="not a plain file of this user's"):
            folder.open_file("stop_request.json", os.O_WRONLY | os.O_APPEND)


def test_a_folder_is_trusted_only_when_no_one_else_can_change_it_or_what_holds_it(tmp_path):
    mine = tmp_path / "mine"
    assert why_untrusted(mine / "spool") is None  # to be made, in folders only this user can change
    with Folder.trusted(mine / "spool", create=True) as folder:
        assert stat.S_IMODE(os.fstat(folder.fd).st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert "can be written by another user" in why_untrusted(shared / "spool")
    with pytest.raises(Untrusted):
        Folder.trusted(shared / "spool", create=True)
    assert not (shared / "spool").exists()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # /tmp, /var/tmp: no one else can rename or delete what is ours there
    assert why_untrusted(sticky / "base" / "spool") is None
    (tmp_path / "link").symlink_to(mine)
    assert why_untrusted(tmp_path / "link" / "spool") is None  # a link of this user's is followed


def test_a_folder_or_a_link_of_another_user_on_the_way_is_refused(tmp_path):
    as_root()
    sticky = tmp_path / "var_tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "made_first"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    assert "belongs to another user" in why_untrusted(theirs / "spool")
    (sticky / "their_link").symlink_to(tmp_path)
    os.chown(sticky / "their_link", NOBODY, NOBODY, follow_symlinks=False)
    assert "a link of another user's" in why_untrusted(sticky / "their_link" / "spool")


def test_a_link_another_user_planted_on_the_way_to_an_output_folder_is_not_followed(tmp_path):
    as_root()
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # a folder others may write: the recipe writes there, but follows no link of theirs
    (out / "checkpoints").symlink_to(victim)
    os.chown(out / "checkpoints", NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(Untrusted, match="a link of another user's"):
        Folder.open(out / "checkpoints", create=True)
    (tmp_path / "mine").symlink_to(out)  # a link of this user's (OUTPUT_DIR on other storage) is followed
    with Folder.open(tmp_path / "mine" / "logs", create=True) as folder:
        folder.write("run_record.json", "{}")
    assert (out / "logs" / "run_record.json").is_file() and list(victim.iterdir()) == []
