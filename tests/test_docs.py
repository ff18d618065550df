"""The README stays short and the docs stay true: every link and every repo path they name exists, every docs page
is reachable from the README, measured figures live on docs/measured.md only, as scripts/record_measured.py writes
it (so re-measuring never edits the README or a prose page), and nothing in the tree speaks of how it was made."""

import itertools
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.repo

README_MAX_BYTES = 10_000  # bytes: "under 10 KB", with room for what the docs index gains
REPO_DIRS = ("scripts", "config", "recipes", "tools", "testkit", "data_prep", "requirements", "tests", "docs")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
HTML_ID = re.compile(r'\bid="([^"]+)"')
# a path into the repo as the docs write it: `scripts/x.sh`, config/profile/*.yaml, recipes/preflight/
REPO_PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(REPO_DIRS)})/[\w./*-]*)")
QUOTED_RESULT = re.compile(r"RESULT\s+\w+=\d")
# Where the product lives, and what in it would speak of how it was made rather than of itself: a tracker's ticket or
# item code, a review's verdict, the commands and paths of the machines it was built on, its merges, its makers
# (upstream's public trackers, "verl issue #1569", are fine). This file is left out: it spells the patterns out.
SCANNED = ("README.md", "docs", "config", "recipes", "tools", "data_prep", "scripts", "tests")
NOT_SCANNED = ("tests/test_docs.py",)
TEXT_SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".json", ".jsonl", ".in", ".cfg", ""}
MADE_HOW = {what: re.compile(pattern) for what, pattern in {
    "a ticket number": r"(?<!verl )(?<!sglang )\b[Ii]ssue[- ]?#?\d+",
    "a ticket": r"\b[Tt]ickets?\b",
    "an item code": r"\([A-Z]\d{1,2}\)",
    "review language": r"\b[Aa]cceptance\b|\b[Tt]he bar\b|\bNOT met\b|\b[Ss]tretch\b",
    "a command or path of the machine it was made on": r"/work/|\bheavy --exclusive\b|`heavy`",
    "a merge": r"\bmerged as\b|\b[Aa] branch\b",
    "who made it": r"\b[Tt]he lead\b|\bour machines\b",
}.items()}


@pytest.fixture(scope="module")
def pages(repo_root):
    """{path: text} of the README and every docs page."""
    paths = [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]
    return {p: p.read_text() for p in paths}


@pytest.fixture(scope="module")
def measured():
    import record_measured as page_writer

    return page_writer


def visible(text: str) -> str:
    """What a reader sees: HTML comments are not part of it."""
    return COMMENT.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, seen = set(HTML_ID.findall(text)), {}
    for _, title in HEADING.findall(FENCE.sub("", text)):
        base = slug(title)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def links(text: str) -> list[str]:
    return LINK.findall(INLINE_CODE.sub("", FENCE.sub("", visible(text))))


def test_readme_is_short(repo_root):
    size = len((repo_root / "README.md").read_bytes())
    assert size < README_MAX_BYTES, f"README.md is {size} bytes (limit {README_MAX_BYTES}): move detail to docs/"


def test_relative_links_resolve(pages, repo_root):
    broken = []
    for page, text in pages.items():
        for target in links(text):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or repo_root not in (dest, *dest.parents):
                broken.append(f"{page.name}: {target} (no such file in the repo)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{page.name}: {target} (no heading or id '{anchor}' in {dest.name})")
    assert not broken, "\n".join(broken)


# a fenced block whose first line names the file it is (docs/how-to.md: the files a new tool or dataset adds)
FILE_BLOCK = re.compile(r"^```(?:python|yaml)\n# ((?:tools|data_prep|config)/[\w/]+\.(?:py|yaml))\n", re.M)


def test_repo_paths_named_exist(pages, repo_root):
    missing = []
    for page, text in pages.items():
        created = set(FILE_BLOCK.findall(text))  # an example file the page shows whole, to be added
        for raw in REPO_PATH.findall(visible(text)):
            path = raw.rstrip(".,:")
            if path in created:
                continue
            if not (list(repo_root.glob(path)) if "*" in path else (repo_root / path).exists()):
                missing.append(f"{page.name}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_every_docs_page_is_linked_from_the_readme(pages, repo_root):
    readme = repo_root / "README.md"
    linked = {(repo_root / t.partition("#")[0]).resolve() for t in links(pages[readme])}
    unlinked = [p.name for p in pages if p != readme and p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link to: {unlinked}"


def test_measured_page_is_what_the_script_writes(measured):
    page = measured.PAGE
    assert measured.render(measured.read_page(page)) == page.read_text(), (
        "docs/measured.md was edited by hand: record figures with `... | python scripts/record_measured.py`")
    assert measured.main(["--check"]) == 0


MEASURED_LINK = re.compile(r"\[([^\]]*)\]\([^)]*measured\.md#([\w-]+)\)")
# what names a version rather than a figure: "CUDA 13.0", "Python 3.12", "nvcc 13.0"
VERSION_BEFORE = re.compile(r"\b(?:CUDA|Python|nvcc|gcc|g\+\+|torch|verl|sglang|SGLang|FlashInfer) $")


def test_prose_links_to_measured_figures_instead_of_repeating_them(pages, measured):
    """A figure repeated in prose would need a prose edit every time it is re-measured (the CI-time commits)."""
    values = {f.name: f.value for f in measured.read_page(measured.PAGE)}
    # figures distinctive enough to find in prose: a decimal of two significant digits and more ("0.9" is a GB, a
    # rate, a threshold as often as a measurement), a range or ratio, or three digits and more
    tokens = {tok: name for name, value in values.items() for tok in value.split(",")
              if re.fullmatch(r"\d+[\-/]\d+|\d{3,}", tok)
              or (re.fullmatch(r"\d+\.\d+", tok) and len(tok.replace(".", "").lstrip("0")) >= 2)}
    repeated = []
    for page, text in pages.items():
        if page == measured.PAGE:
            continue
        # the plan's time figures, which test_the_time_per_profile_table_is_the_plans_time_row_for_every_profile holds
        # against the code: they follow it, not a measurement
        text = re.sub(r"(## Time per profile\n.*?\n)\|.*?\n\n", r"\1\n", text, flags=re.S)
        repeated += [f"{page.name}: {m.group(0)}" for m in QUOTED_RESULT.finditer(text)]
        shown = visible(text)
        # a link's text that shows the figure of the row it links to ("[1.6 s](measured.md#x)" for x = 1.62) is
        # that row, not a copy of another row that happens to hold the same number
        own = [(m.start(1), m.end(1), values.get(m.group(2), "")) for m in MEASURED_LINK.finditer(shown)]
        for tok, name in tokens.items():  # not a line number cited as path:line, nor a version ("CUDA 13.0")
            if any(not VERSION_BEFORE.search(m.string[:m.start()])
                   and not any(a <= m.start() < b and value.startswith(tok) for a, b, value in own)
                   for m in re.finditer(rf"(?<![\w.:]){re.escape(tok)}(?![\w]|\.\d)", shown)):
                repeated.append(f"{page.name}: {tok} (link to measured.md#{name} instead)")
    assert not repeated, "measured figures repeated outside docs/measured.md:\n" + "\n".join(repeated)


def test_recording_rewrites_only_the_named_rows(measured, tmp_path):
    page = tmp_path / "measured.md"
    shutil.copy(measured.PAGE, page)
    before = {f.name: f for f in measured.read_page(page)}
    bench_output = ["run 1/5: 0.80 s\n", "RESULT data_prep_seconds=0.812 calculator_p99_ms=0.0931\n"]
    assert measured.main(["--page", str(page), "--machine", "test box"], stdin=bench_output) == 0

    after = {f.name: f for f in measured.read_page(page)}
    assert after.keys() == before.keys()
    assert (after["data_prep_seconds"].value, after["calculator_p99_ms"].value) == ("0.812", "0.0931")
    assert after["data_prep_seconds"].recorded.endswith("test box")
    assert measured.main(["--page", str(page), "--machine", "one H100", "--commit", "abc1234"],
                         stdin=["RESULT calculator_p99_ms=0.1\n"]) == 0  # measured elsewhere, at another commit
    assert " at abc1234, one H100" in {f.name: f for f in measured.read_page(page)}["calculator_p99_ms"].recorded
    assert all(after[n] == before[n] for n in before if n not in ("data_prep_seconds", "calculator_p99_ms"))
    assert measured.main(["--page", str(page), "--check"]) == 0


def test_recording_an_unknown_figure_needs_how_it_was_measured(measured, tmp_path, capsys):
    page = tmp_path / "measured.md"
    shutil.copy(measured.PAGE, page)
    original = page.read_text()
    assert measured.main(["--page", str(page)], stdin=["RESULT brand_new_ms=1.5\n"]) == 1
    assert "brand_new_ms" in capsys.readouterr().err and page.read_text() == original
    assert measured.main(["--page", str(page), "--how", "`python scripts/bench_x.py`", "--target", "≤ 2 ms"],
                         stdin=["RESULT brand_new_ms=1.5\n"]) == 0
    added = measured.read_page(page)[-1]
    assert (added.name, added.value, added.target) == ("brand_new_ms", "1.5", "≤ 2 ms")


def test_rerecording_another_way_replaces_how_and_drop_removes_a_row(measured, tmp_path):
    page = tmp_path / "measured.md"
    shutil.copy(measured.PAGE, page)
    before = measured.read_page(page)
    name, other = before[0].name, before[1].name
    assert measured.main(["--page", str(page), "--how", "by hand: a new way"], stdin=[f"RESULT {name}=9.9\n"]) == 0
    after = {f.name: f for f in measured.read_page(page)}
    assert (after[name].value, after[name].how, after[name].target) == ("9.9", "by hand: a new way", before[0].target)

    assert measured.main(["--page", str(page), "--drop", "no_such_figure"]) == 1
    assert measured.main(["--page", str(page), "--drop", other]) == 0
    names = [f.name for f in measured.read_page(page)]
    assert other not in names and len(names) == len(before) - 1
    assert measured.main(["--page", str(page), "--check"]) == 0


def test_rewording_changes_a_rows_words_not_what_was_measured(measured, tmp_path):
    page = tmp_path / "measured.md"
    shutil.copy(measured.PAGE, page)
    before = {f.name: f for f in measured.read_page(page)}
    name = next(iter(before))
    assert measured.main(["--page", str(page), "--reword", name, "--target", "≤ 9 s"]) == 0
    after = {f.name: f for f in measured.read_page(page)}
    assert after[name].target == "≤ 9 s"
    assert (after[name].value, after[name].how, after[name].recorded) == \
        (before[name].value, before[name].how, before[name].recorded)
    assert all(after[n] == before[n] for n in before if n != name)
    original = page.read_text()
    assert measured.main(["--page", str(page), "--reword", name]) == 1  # nothing to change
    assert measured.main(["--page", str(page), "--reword", "no_such_figure", "--how", "x"]) == 1
    assert page.read_text() == original


def test_rewording_the_machine_keeps_the_date_and_commit(measured, tmp_path):
    page = tmp_path / "measured.md"
    shutil.copy(measured.PAGE, page)
    before = {f.name: f for f in measured.read_page(page)}
    name = next(iter(before))
    assert measured.main(["--page", str(page), "--reword", name, "--machine", "one H100, an air-gapped node"]) == 0
    after = {f.name: f for f in measured.read_page(page)}[name]
    date_and_commit = before[name].recorded.split(", ")[0]
    assert after.recorded == f"{date_and_commit}, one H100, an air-gapped node"
    assert (after.value, after.how, after.target) == (before[name].value, before[name].how, before[name].target)


def test_the_pin_count_in_install_is_the_locks(repo_root):
    lock = (repo_root / "requirements" / "gpu.txt").read_text()
    pins = len(re.findall(r"^[A-Za-z0-9][\w.\-\[\],]*==", lock, re.M))  # as install_gpu_env.sh counts them
    said = re.search(r"`requirements/gpu\.txt`: (\d+) pins", (repo_root / "docs" / "install.md").read_text())
    assert said and int(said.group(1)) == pins, f"docs/install.md: {said and said.group(0)}; the lock has {pins}"


def made_how(root: Path) -> list[str]:
    """`path:line: what: text` for each line under `root` that speaks of how the project was made."""
    files = [root / name for name in SCANNED if (root / name).is_file()]
    files += [p for name in SCANNED if (root / name).is_dir() for p in sorted((root / name).rglob("*"))
              if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    found = []
    for path in files:
        if str(path.relative_to(root)) in NOT_SCANNED:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [f"{path.relative_to(root)}:{number}: {what}: {m.group(0)}"
                      for what, pattern in MADE_HOW.items() for m in pattern.finditer(line)]
    return found


def test_the_product_speaks_of_itself_not_of_how_it_was_made(repo_root):
    """A reader has no access to the tracker, the review or the machines that built this: say what a check is and
    what it shows, not which ticket asked for it or who accepted it."""
    found = made_how(repo_root)
    assert not found, "say what the product does instead:\n" + "\n".join(found)


def test_the_scan_catches_a_ticket_planted_in_a_config(repo_root, tmp_path):
    shutil.copytree(repo_root / "config", tmp_path / "config")
    assert made_how(tmp_path) == []
    profile = tmp_path / "config" / "profile" / "cpu_smoke.yaml"
    lines = profile.read_text().splitlines()
    profile.write_text("\n".join([*lines, "# sized for the CPU check (issue 7)"]) + "\n")
    assert made_how(tmp_path) == [f"config/profile/cpu_smoke.yaml:{len(lines) + 1}: a ticket number: issue 7"]


@pytest.mark.parametrize(("line", "what"), [
    ("# the CPU check (Issue #19)", "a ticket number"),
    ("see the ticket for why", "a ticket"),
    ("write a call in 1 of every 2 first turns (B7)", "an item code"),
    ("the bar (+20 points) is met", "review language"),
    ("| seed 0 | 0.520 | NOT met |", "review language"),
    ("then the stretch rows", "review language"),
    ("by hand, under `/work/bin/heavy --exclusive`", "a command or path of the machine it was made on"),
    ("at 6d90a57 (a branch merged as 3a97934)", "a merge"),
    ("Data kept beside the repo on our machines", "who made it"),
    ("verl issue #1569 reports ~0.86", None),  # upstream's public tracker: fine
    ("under `heavy --exclusive`", "a command or path of the machine it was made on"),
    ("a heavy import, a tool heavier than a calculator", None),
])
def test_each_kind_of_making_of_is_caught(tmp_path, line, what):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(line + "\n")
    kinds = {hit.split(": ")[1] for hit in made_how(tmp_path)}
    assert kinds == ({what} if what else set()), made_how(tmp_path)


def test_the_documented_publish_evals_commands_get_past_their_arguments(pages, repo_root, tmp_path):
    """Each `gsm8k-publish-evals ...` the README, the docs and its own docstring show, placeholders filled, must be
    refused only for what is missing here (no dump, no W&B key), never for its arguments."""
    import os
    import shlex
    import subprocess

    from recipes.results import publish
    from testkit.commands import command as installed

    docstring = publish.__doc__
    texts = [*pages.values(), docstring]
    commands = {m.group(1).replace("\\\n", " ") for text in texts  # each line that runs it
                for m in re.finditer(r"^[ \t]*(gsm8k-publish-evals (?:[^\n#]|\\\n)*)", text, re.M)}
    assert len(commands) >= 3, commands  # the README's, docs/evaluation.md's, the docstring's two
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_API_KEY")}
    env.update(HOME=str(tmp_path))
    for command in sorted(commands):
        args = re.sub(r"\[[^\]]*\]", "", command).replace("<exp>", "exp").replace("PID", "1")
        name, *rest = shlex.split(args)
        proc = subprocess.run([*installed(name), *rest], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 1 and "usage:" not in proc.stderr, f"{command}\n{proc.stderr}"
        refused = re.search(r"validation dir .* does not exist|no W&B credentials", proc.stderr)
        assert refused, f"{command}\n{proc.stderr}"


# ---- claims that went stale once: each checked against what it describes ------------------------------------------

# How this project's own builders borrow GPUs and measure things is not the product's business: none of these words in
# any product file (README, docs, config, code, scripts, tests). This file is left out: it spells them.
WORKSHOP = {what: re.compile(pattern) for what, pattern in {
    "a GPU lent or given back": r"\b(?:[Ll]ent|[Ll]ending)\b|\bgive the machine back\b|\bgiven back\b",
    "the GPU kit that carries a checkout to a borrowed machine": r"(?i)\.gpukit|\bgpu-kit\b|\bKIT_\w+|\bkits?\b"
                                                                  r"|<kit folder>",
    "the borrowing tool's output folder": r"\$OUT\b|device's output folder|\bdevice tool\b",
    "the builders' shared records and machines": r"shared GPU-run records|\bgpu-runs/|\bother users\b|\.\./shared\b",
}.items()}


def workshop_words(root: Path) -> list[str]:
    files = [root / name for name in SCANNED if (root / name).is_file()]
    files += [p for name in SCANNED if (root / name).is_dir() for p in sorted((root / name).rglob("*"))
              if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return [f"{path.relative_to(root)}:{number}: {what}: {m.group(0)}"
            for path in files if str(path.relative_to(root)) not in NOT_SCANNED
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            for what, pattern in WORKSHOP.items() for m in pattern.finditer(line)]


def test_the_product_describes_a_gpu_node_not_how_its_builders_borrow_one(repo_root):
    found = workshop_words(repo_root)
    assert not found, "describe a GPU node, an air-gapped node and the recipe's own scripts instead:\n" + \
        "\n".join(found)


@pytest.mark.parametrize(("line", "found"), [
    ("**When a GPU is lent** (one machine, 15 minutes of it)", True),
    ("bash .gpukit/run.sh wait 570", True),
    ("KERNELS=on bash <kit folder>/build.sh . /tmp/out", True),
    ("With `OUT` set ($OUT, the device's output folder)", True),
    ("rc 0: done, give the machine back", True),
    ("the run's files in the project's shared GPU-run records", True),
    ("lighter jobs of other users ran beside it", True),
    ("default `../shared/data/gsm8k`", True),
    ("through the air-gapped GPU kit", True),
    ("$OUTPUT_DIR/checkpoints on a testkit fixture, an air-gapped node", False),
])
def test_each_workshop_word_is_caught(tmp_path, line, found):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(line + "\n")
    assert bool(workshop_words(tmp_path)) == found, workshop_words(tmp_path)


def test_the_docs_index_starts_with_the_how_tos(pages, repo_root):
    index = pages[repo_root / "README.md"].split("## Docs", 1)[1]
    first = re.search(r"^- \[([^\]]+)\]\(([^)]+)\)", index, re.M)
    assert first and first.group(2) == "docs/how-to.md", first and first.group(0)


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4}
GSM8K_TRAIN_ROWS = 7473


def test_the_profiles_batch_schedule_in_configuration_md_is_the_configs():
    """configuration.md says, for each profile that changes the batch, its prompts a step, its steps and the PPO
    updates each step makes: what the composed config gives (recipes/preflight/schedule.py reads verl's rules)."""
    from recipes.config_view import ConfigView
    from recipes.launch.knobs import Knobs, compose_launch_config
    from recipes.preflight.schedule import schedule_of

    text = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    item = text[text.index("Two of them change the batch"):].split("\n3. ", 1)[0]
    claims = re.findall(r"`(\w+)`(?: takes)? (\d+)(?: prompts a step)? \((\d+) steps\b([^)]*)\)", item)
    assert {c[0] for c in claims} >= {"4gpu", "multinode"}, item
    for profile, prompts, steps, rest in claims:
        updates = re.search(r"\b(one|two|three|four|\d+) (?:PPO )?updates?\b", rest)
        schedule = schedule_of(ConfigView.of(compose_launch_config(Knobs(profile=profile))))
        assert int(prompts) == schedule.prompts, f"{profile}: {prompts} prompts a step"
        assert int(steps) == GSM8K_TRAIN_ROWS // schedule.prompts * schedule.epochs, f"{profile}: {steps} steps"
        assert updates, f"configuration.md says nothing of {profile}'s updates a step: {rest}"
        said = WORDS.get(updates.group(1)) or int(updates.group(1))
        assert said == schedule.updates_per_step, f"{profile}: '{updates.group(0)}', the config makes " \
                                                  f"{schedule.updates_per_step}"


def test_first_use_kernels_never_says_the_census_lacks_a_module_it_holds(repo_root):
    from recipes.gpu_env.kernel_census import census

    keys = {module.key for module in census()}
    text = (repo_root / "docs" / "first-use-kernels.md").read_text()
    sentences = re.split(r"(?<=\.)\s+", " ".join(FENCE.sub("", text).split()))
    said_missing = [token.split("/")[-1] for sentence in sentences
                    if re.search(r"census (?:does not|doesn't) hold|not in the census|census (?:misses|lacks)",
                                 sentence)
                    for token in INLINE_CODE.findall(sentence)]
    assert not keys & {t.strip("`") for t in said_missing}, "modules the census does hold, said missing"


def script_defaults(repo_root) -> dict[str, set[str]]:
    """{knob: its defaults} over the scripts' `NAME=${NAME:-default}` lines and the launcher's declared knobs."""
    from dataclasses import fields

    from recipes.launch.knobs import Knobs

    found: dict[str, set[str]] = {f.name.upper(): {f.default} for f in fields(Knobs)}
    for script in (repo_root / "scripts").glob("*.sh"):
        for name, default in re.findall(r"^(?:export )?([A-Z][A-Z0-9_]*)=\$\{\1:?-([^}]*)\}", script.read_text(), re.M):
            found.setdefault(name, set()).add(default)
    return found


def test_configuration_md_names_every_launcher_knob(repo_root):
    """The knobs' list in configuration.md ("Three layers") holds each knob recipes/launch/knobs.py declares."""
    from recipes.launch.knobs import Knobs

    text = (repo_root / "docs" / "configuration.md").read_text()
    item = text[text.index("3. **Launcher knobs**"):].split("\n\n", 1)[0]
    assert [name for name in Knobs.names() if f"`{name}`" not in item] == []


def test_a_knobs_documented_default_is_a_scripts(pages, repo_root):
    defaults = script_defaults(repo_root)
    wrong = [f"{page.name}: `{name}` default `{said}` (scripts: {sorted(defaults[name])})"
             for page, text in pages.items()
             for name, said in re.findall(r"`([A-Z][A-Z0-9_]+)` \([^()]*?\bdefault `([^`]*)`", visible(text))
             if name in defaults and said not in defaults[name]]
    assert not wrong, "\n".join(wrong)


def test_troubleshooting_has_one_entry_per_symptom(repo_root):
    rows = [line for line in (repo_root / "docs" / "troubleshooting.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith(("| symptom", "| line", "|---"))]
    seen: dict[str, str] = {}
    repeated = []
    for row in rows:
        quoted = re.findall(r"`([^`]+)`|\"([^\"]+)\"", row.split(" | ")[0])
        for text in ("".join(q) for q in quoted):
            key = " ".join(re.findall(r"[A-Za-z]{2,}", text)[:4]).lower()
            if len(key.split()) >= 3:
                if key in seen and seen[key] != row:
                    repeated.append(key)
                seen.setdefault(key, row)
    assert not repeated, f"symptoms with more than one entry: {repeated}"


CITED = re.compile(r"docs/([\w-]+\.md)#([\w-]+)()|\(docs/([\w-]+\.md)(): ([^)\"']+)\)")


def test_every_docs_section_the_code_cites_exists(repo_root):
    """A warning or comment that sends a reader to `docs/x.md#anchor` or "(docs/x.md: a section)" names one there."""
    missing = []
    for path in [p for d in ("recipes", "scripts", "tools", "data_prep", "config") for p in (repo_root / d).rglob("*")
                 if p.is_file() and p.suffix in {".py", ".sh", ".yaml"}]:
        for found in CITED.findall(path.read_text()):
            page, anchor, title = found[0] or found[3], found[1], found[2] or found[5]
            target = repo_root / "docs" / page
            if not target.is_file():
                missing.append(f"{path.relative_to(repo_root)}: docs/{page} (no such page)")
                continue
            headings = {t.lower() for _, t in HEADING.findall(FENCE.sub("", target.read_text()))}
            if anchor and anchor not in anchors(target.read_text()):
                missing.append(f"{path.relative_to(repo_root)}: docs/{page}#{anchor}")
            if title and title.strip().lower() not in headings:
                missing.append(f"{path.relative_to(repo_root)}: docs/{page}: {title} (no such section)")
    assert not missing, "\n".join(missing)


def test_the_trace_budgets_error_suggests_a_budget_of_at_least_one_group():
    """`TRACE_GB_PER_DAY=abc`: the example the error gives must trace a whole group of the default profile, not be
    clamped up to one."""
    from recipes.launch.knobs import Knobs, compose_launch_config
    from recipes.preflight.trace_budget import parse_budget
    from recipes.tracing.volume import TraceBudgetError, TraceShape, volume

    with pytest.raises(TraceBudgetError) as refused:
        parse_budget("abc")
    example = re.search(r"e\.g\. ([\d.]+)", str(refused.value))
    assert example, str(refused.value)
    one_group = volume(TraceShape.of(compose_launch_config(Knobs())), 1).gb_per_day
    assert float(example.group(1)) >= one_group, f"{example.group(0)} is below one group (~{one_group:.2f} GB a day)"


WRAPPERS = ("smoke_1gpu.sh", "eval_gsm8k.sh", "submit_multinode.sh")


@pytest.mark.parametrize("script", WRAPPERS)
def test_a_wrappers_help_lists_only_the_launcher_knobs_it_leaves_alone(repo_root, script):
    """A script that runs scripts/run_gsm8k_grpo.sh lists that one's knobs too: only those it does not set itself
    (they would show the launcher's default where the wrapper uses another), and no line that is not a knob."""
    import subprocess

    path = repo_root / "scripts" / script
    out = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, timeout=30).stdout
    own, _, inherited = out.partition("those of scripts/run_gsm8k_grpo.sh")
    knob_lines = [line for line in out.splitlines() if re.match(r"^  [A-Z][A-Z0-9_]*=", line)]
    runs = [line for line in knob_lines if not line.split(" #")[0].rstrip().endswith("}")]
    assert not runs, f"listed as knobs, lines that run something: {runs}"
    set_here = set()  # what it hands on with a value of its own: `export NAME=`, `NAME=value exec|bash ...`
    for line in path.read_text().splitlines():
        words = line.split(" #")[0].split()
        if words[:1] == ["export"]:
            set_here |= {w.split("=")[0] for w in words[1:] if re.match(r"[A-Z][A-Z0-9_]*=", w)}
        prefix = list(itertools.takewhile(lambda w: re.match(r"[A-Z][A-Z0-9_]*=", w) and "$(" not in w, words))
        if prefix and words[len(prefix):len(prefix) + 1] in (["exec"], ["bash"]):
            set_here |= {w.split("=")[0] for w in prefix}
    listed = set(re.findall(r"^  ([A-Z][A-Z0-9_]*)=", inherited, re.M))
    assert listed, out
    assert not listed & set_here, f"launcher defaults listed for knobs {script} sets: {sorted(listed & set_here)}"


def test_data_prep_from_a_checkout_runs_or_says_which_python_in_one_line(repo_root):
    """`python data_prep/gsm8k.py` with a Python that has not installed the recipe (nor, perhaps, its packages): it
    finds the repo's own packages by itself, and a missing package is one line that names the env to use."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-I", "-S", "data_prep/gsm8k.py", "--help"], cwd=repo_root,
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        assert "--tool_set" in proc.stdout
    else:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and ".venv" in lines[0] and "No module named 'data_prep'" not in proc.stderr, \
            proc.stderr


# ---- the figures a newcomer reads: each page's against what the plan says -----------------------------------------

def table_rows(text: str, heading: str) -> dict[str, list[str]]:
    """{profile: its cells} of the first table after `heading`."""
    section = text[text.index(heading):]
    table = section[section.index("\n|"):].split("\n\n", 1)[0]
    rows = [line.strip("|").split(" | ") for line in table.strip().splitlines()[2:]]
    return {re.search(r"`(\w+)`", cells[0]).group(1): [c.strip() for c in cells] for cells in rows}


@pytest.fixture(scope="module")
def gsm8k_sized_plans(tmp_path_factory):
    """Each profile's facts as a dry run works them out, over files of GSM8K's sizes (7473 / 1319 rows), for the
    card the profile is for (no GPU here) and with the check scripts' small models where they give one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recipes.constants import PROFILE_DIR
    from recipes.launch.knobs import Knobs, compose_launch_config
    from recipes.preflight.facts import facts_of

    folder = tmp_path_factory.mktemp("gsm8k_sized")
    for split, rows in (("train", 7473), ("test", 1319)):
        pq.write_table(pa.table({"row": list(range(rows))}), folder / f"{split}.parquet")
    return {p.stem: facts_of(compose_launch_config(Knobs(profile=p.stem, data_dir=str(folder))))
            for p in PROFILE_DIR.glob("*.yaml")}


def test_the_time_per_profile_table_is_the_plans_time_row_for_every_profile(repo_root, gsm8k_sized_plans):
    """how-to.md's table: every profile, its steps, a step's time and the run's, as the dry run's `time` row says
    them (recipes/launch/plan.py time_figures, from each profile's recipe.step_time)."""
    from recipes.launch.plan import time_figures

    table = table_rows((repo_root / "docs" / "how-to.md").read_text(), "## Time per profile")
    assert set(table) == set(gsm8k_sized_plans), "a profile without a row, or a row of no profile"
    for profile, facts in gsm8k_sized_plans.items():
        _, _, steps, step, run, _ = table[profile]
        figures = time_figures(facts.view, facts.schedule, facts.size, facts.step_made_for)
        if figures is None:
            assert (step, run) == ("—", "—"), profile
            continue
        assert (steps, step, run) == (str(facts.schedule.steps), *figures[:2]), profile


def test_the_profiles_peak_memory_in_configuration_md_is_the_plans_on_its_card(repo_root, gsm8k_sized_plans):
    table = table_rows((repo_root / "docs" / "configuration.md").read_text(), "## Profiles for the GPUs you have")
    for profile, cells in table.items():
        plan = gsm8k_sized_plans[profile].memory
        said = re.fullmatch(r"~(\d+) GB", cells[4])
        assert said and int(said.group(1)) == round(plan.peak), f"{profile}: {cells[4]}, the plan ~{plan.peak:.0f}"
        assert f"{plan.gpu:.0f} GB" in cells[1], f"{profile}: planned on {plan.gpu:.0f} GB, not {cells[1]}"


def test_the_micro_batches_the_docs_name_are_the_configs(repo_root):
    from recipes.config_view import ConfigView
    from recipes.launch.knobs import Knobs, compose_launch_config

    micro = ConfigView.of(compose_launch_config(Knobs())).actor_micro_batch
    howto = (repo_root / "docs" / "how-to.md").read_text()
    assert re.findall(r"`actor_rollout_ref\.actor\.ppo_micro_batch_size_per_gpu` \((\d+)\)", howto) == [str(micro)]
    estimate = (repo_root / "docs" / "configuration.md").read_text().split("### Against the one GPU run so far")[1]
    assert re.findall(r"3B model at\s+micro-batches of (\d+)", estimate) == [str(micro)]


def test_stale_lines_a_newcomer_met_stay_gone(repo_root):
    import subprocess

    from recipes.launch.plan import LEGACY_TRAINER_NOTE

    assert "neo" not in LEGACY_TRAINER_NOTE  # a claim of a verl branch, in every plan, nobody checks
    install = visible((repo_root / "docs" / "install.md").read_text())
    assert "No module named 'data_prep'" not in install  # data prep finds the repo's packages itself
    launch_help = subprocess.run(["bash", str(repo_root / "scripts" / "run_gsm8k_grpo.sh"), "--help"],
                                 capture_output=True, text=True, timeout=60).stdout
    assert "line above" not in launch_help and "PYTHON=${PYTHON:-}" in launch_help
    sbatch_help = subprocess.run(["bash", str(repo_root / "scripts" / "run_gsm8k_grpo.sbatch"), "--help"],
                                 capture_output=True, text=True, timeout=60).stdout
    directives = [line for line in sbatch_help.splitlines() if "SBATCH --" in line]
    assert directives and all(line.startswith("  #SBATCH --") for line in directives), directives
    for profile in (repo_root / "config" / "profile").glob("*.yaml"):  # the plan's figures have one home: the plan
        said = re.findall(r"#.*~\d+ GB (?:at|while)", profile.read_text())
        assert not said, f"{profile.name} restates the memory plan: {said}"
