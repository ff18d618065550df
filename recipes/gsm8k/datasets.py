"""The datasets the reward can score: every module of data_prep/ that declares one, found by name when the reward
first asks (the task never imports the data prep; the data prep builds on the task's tool sets and answers).

A dataset is one module beside data_prep/gsm8k.py that writes its rows (data_prep/rows.py) and declares, at module
level, `DATASET = Dataset(data_source=..., check_answer=...)`: the data_source its rows carry and how an answer is
checked. The reward (recipes/gsm8k/reward.py) finds a row's dataset here by its data_source, the tools-off variant
(`no_tools_source`) included; nothing else needs to know the dataset."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

PACKAGE = "data_prep"
NO_TOOLS_SUFFIX = "_no_tools"


def no_tools_source(data_source: str) -> str:
    """The data_source of a dataset's rows without tools."""
    return f"{data_source}{NO_TOOLS_SUFFIX}"


# check_answer(model_text, ground_truth, method) -> (the answer read, or None; whether it is right). `method` is the
# reward's: "strict" (only an answer given in the format the prompt asks for) or "flexible" (any readable answer).
AnswerCheck = Callable[[str, str, str], tuple[str | None, bool]]


@dataclass(frozen=True)
class Dataset:
    data_source: str
    check_answer: AnswerCheck

    @property
    def data_sources(self) -> tuple[str, str]:
        """Its rows' data_source with tools and without."""
        return self.data_source, no_tools_source(self.data_source)


class UnknownDataSource(ValueError):
    pass


@lru_cache(maxsize=1)
def datasets() -> dict[str, Dataset]:
    """data_source -> its dataset, for every dataset module of data_prep/ (each imported once)."""
    package = importlib.import_module(PACKAGE)
    found: dict[str, tuple[str, Dataset]] = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{PACKAGE}.{module_info.name}")
        dataset = getattr(module, "DATASET", None)
        if not isinstance(dataset, Dataset):
            continue
        for source in dataset.data_sources:
            if source in found:
                raise ValueError(f"data_source {source!r} is declared by both {found[source][0]} and {module.__name__}")
            found[source] = (module.__name__, dataset)
    return {source: dataset for source, (_, dataset) in found.items()}


def dataset_for(data_source: str) -> Dataset:
    """The dataset whose rows carry `data_source`; UnknownDataSource (one line: what is known, how to add one)."""
    known = datasets()
    if data_source not in known:
        raise UnknownDataSource(
            f"no dataset declares data_source {data_source!r} (known: {', '.join(sorted(known))}); a dataset is a "
            f"module in data_prep/ with DATASET = Dataset(data_source=..., check_answer=...) (docs/how-to.md)")
    return known[data_source]
