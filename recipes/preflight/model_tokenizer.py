"""The launch's tokenizer, loaded once for the preflight's checks that need it (the SGLang model check, the
overlong-prompt count), by verl's own loader, as training loads it: a Qwen2.5 tokenizer takes about a second to load
(its tokenizer.json is ~7 MB of JSON), which each check paid again."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


def load_tokenizer(folder: Path):
    """(tokenizer, "") or (None, why it does not load, in one line)."""
    return _load(str(folder), _signature(folder))


def _signature(folder: Path) -> tuple:
    """The folder's files as they are now: a folder changed since its last load (a fixed tokenizer, in a process that
    plans several launches) loads again."""
    try:
        with os.scandir(folder) as entries:
            stats = [(e.name, e.stat()) for e in entries if e.is_file()]
        return tuple(sorted((name, st.st_mtime_ns, st.st_size) for name, st in stats))
    except OSError:
        return ()


@lru_cache(maxsize=2)
def _load(folder: str, signature: tuple):
    try:
        from verl.utils import hf_tokenizer

        return hf_tokenizer(folder, local_files_only=True), ""
    except Exception as err:  # one line, whatever it is
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
