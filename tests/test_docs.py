"""The user pages read as the docs promise (short sentences, no issue numbers, no dates),
and every link and path the docs, the README and the code's messages name resolves.

User pages: README.md and docs/guide.md. Measurement logs (docs/lab/) keep their dates and
issue numbers on purpose: they are the developers' record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

USER_PAGES = ["README.md", "docs/guide.md", "docs/running.md"]
MAX_WORDS = 40

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
# a full stop, ! or ? before a space ends a sentence, unless it closes "e.g." or "i.e."
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?:;]\s+(?=[A-Z`*(\[])")
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.I)
DATE = re.compile(r"\b(19|20)\d\d-\d\d-\d\d\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? "
                  r"(\d{1,2}, )?(19|20)\d\d\b")
# docs/x.md, jobs/x.slurm, tests/x.py, benchmarks/x.py as named in text and messages
PATH_MENTION = re.compile(r"(?<![\w/.-])((?:docs|jobs|tests|benchmarks)/[\w./-]*\w\.(?:md|py|slurm|sh|sample))")


def prose(text: str) -> str:
    """The page without code blocks and comments; code spans and links as one word each."""
    text = COMMENT.sub(" ", FENCE.sub("\n", text))
    text = CODE_SPAN.sub("CODE", text)
    return LINK.sub(lambda m: m.group(1), text)


def sentences(text: str) -> list[str]:
    """Sentences of a markdown page: headings, list items, table cells and paragraphs are
    split apart, then split at sentence ends."""
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*] |\d+\. |#|\|))", prose(text)):
        cells = block.split("|") if block.lstrip().startswith("|") else [block]
        for cell in cells:
            out += [s for s in SENTENCE_END.split(" ".join(cell.split())) if s.strip()]
    return out


def words(sentence: str) -> int:
    return len([w for w in sentence.split() if re.search(r"\w", w)])


def test_the_sentence_splitter_splits_where_a_reader_would():
    page = ("# Title\n\nOne two three. Four five, six: `a b c d` seven.\n- item one\n- item two\n\n"
            "| a b | c |\n| --- | --- |\n\n```sh\nnot a sentence at all\n```\n")
    assert sentences(page) == ["# Title", "One two three", "Four five, six", "CODE seven.", "- item one",
                               "- item two", "a b", "c", "---", "---"]
    long = " ".join(["word"] * 41) + "."
    assert max(words(s) for s in sentences(long)) == 41


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_have_no_sentence_over_40_words(page):
    long = [s for s in sentences((ROOT / page).read_text()) if words(s) > MAX_WORDS]
    assert not long, f"{page}: {len(long)} sentence(s) over {MAX_WORDS} words, the first: {long[0]!r}"


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_name_no_issue_and_no_date(page):
    text = prose((ROOT / page).read_text())
    assert not ISSUE.search(text), f"{page}: {ISSUE.search(text).group(0)!r}"
    assert not DATE.search(text), f"{page}: {DATE.search(text).group(0)!r}"


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "jobs" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for m in LINK.finditer(FENCE.sub("", page.read_text())):
        target = m.group(2)
        if re.match(r"[a-z]+:", target):
            continue                             # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target} (no file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: " + ", ".join(broken)


def test_every_path_the_docs_and_messages_name_exists():
    """docs/lab/sync-modes.md, jobs/train.slurm, ... named in the docs, the README, the job
    scripts and mpidwe's docstrings and messages: a moved page leaves no stale name."""
    sources = markdown_files() + sorted((ROOT / "mpidwe").rglob("*.py")) + sorted((ROOT / "jobs").glob("*")) + \
        sorted((ROOT / "benchmarks").glob("*.py")) + [ROOT / "Makefile", ROOT / "hostfile.example"]
    missing = set()
    for src in sources:
        if not src.is_file():
            continue
        for m in PATH_MENTION.finditer(src.read_text(errors="replace")):
            name = m.group(1).rstrip(".")
            if not (ROOT / name).exists():
                missing.add(f"{name} (in {src.relative_to(ROOT)})")
    assert not missing, sorted(missing)
