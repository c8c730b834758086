"""The instructor page of the handouts: per notebook its objectives, exercises, sections and times; the
day plans (half day, a full "DDP core" day, two and three days) computed from those times; a table
of all notebooks and the set-up checklist. Every number comes from the notebooks or from
tools/notebook_times.json (strict nbval's measured run times)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nav import LEARNER_PAGES
from notebook_pages import (
    CHECK_TAG,
    EXERCISE_TAG,
    INSTRUCTOR_BANNER,
    SOLUTION_TAG,
    cell_text,
    exercises,
    links,
    objectives,
    plain,
    tags,
    words,
    write_page,
)

from ddp_helpers.series import NAV_TAG, ROOT, notebooks, title_of

READING_WORDS_PER_MIN = 120   # markdown and code read aloud or explained
MINUTES_PER_EXERCISE = 10
MINUTES_PER_DEMO = 5          # a section shown as a demo: its cells run and its pictures shown
HALF_DAY_BLOCKS = [("09:00", 90), ("break", 15), ("10:45", 90)]
FULL_DAY_BLOCKS = HALF_DAY_BLOCKS + [("lunch", 60), ("13:30", 90), ("break", 15), ("15:15", 90)]
TIMES = ROOT / "tools" / "notebook_times.json"


@dataclass
class Session:
    stem: str
    title: str
    minutes: int
    run_seconds: float | None


def teaching_minutes(nb, run_seconds: float | None) -> int:
    """Run time + reading + exercises, rounded up to 5 minutes."""
    minutes = (run_seconds or 0) / 60 + words(nb) / READING_WORDS_PER_MIN \
        + MINUTES_PER_EXERCISE * len(exercises(nb))
    return 5 * math.ceil(minutes / 5)


# --- what a day plan teaches of a notebook ---------------------------------------------------------

NUMBERED_SECTION = re.compile(r"## (\d+)\.\s*(.*)")


@dataclass
class Outline:
    """A notebook's words by part: the frame (title, objectives, set-up, the exercises' heading, summary:
    every line under no ``## N.`` heading), each numbered section, and each exercise with its solution
    and check cells. The parts add up to ``words(nb)``."""
    frame: int
    sections: dict[int, int]
    headings: dict[int, str]
    exercises: list[int]


def outline(nb) -> Outline:
    frame, sections, headings, tasks = 0, {}, {}, []
    current, in_exercise = None, False
    for cell in nb.cells:
        cell_tags = set(tags(cell))
        if NAV_TAG in cell_tags:
            continue
        if EXERCISE_TAG in cell_tags:
            tasks.append(len(cell.source.split()))
            in_exercise = True
            continue
        if in_exercise and cell_tags & {SOLUTION_TAG, CHECK_TAG}:
            tasks[-1] += len(cell.source.split())
            continue
        in_exercise = False
        for line in cell.source.splitlines():
            if cell.cell_type == "markdown" and line.startswith("## "):
                m = NUMBERED_SECTION.match(line)
                current = int(m[1]) if m else None
                if m:
                    sections.setdefault(current, 0)
                    headings[current] = plain(m[2])
            if current is None:
                frame += len(line.split())
            else:
                sections[current] += len(line.split())
    return Outline(frame, sections, headings, tasks)


@dataclass(frozen=True)
class Part:
    """What a plan teaches of notebook ``number``: its ``## N.`` sections (None: all of them), its exercises
    (None: all; (): none in class) and sections shown as a demo (cells run, pictures shown, text left to
    read). The frame (title, objectives, set-up, summary) is always taught."""
    number: str
    sections: tuple[int, ...] | None = None
    exercises: tuple[int, ...] | None = None
    demo: tuple[int, ...] = ()


def spans(numbers) -> str:
    """(1, 2, 3, 5) -> "1–3, 5"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def chosen(o: Outline, part: Part) -> tuple[list[int], list[int]]:
    """The sections and exercises ``part`` teaches; an unknown number or a section taught twice is an error."""
    sections = list(o.sections) if part.sections is None else list(part.sections)
    tasks = list(range(1, len(o.exercises) + 1)) if part.exercises is None else list(part.exercises)
    wrong = [f"§{s}" for s in (*sections, *part.demo) if s not in o.sections] \
        + [f"exercise {e}" for e in tasks if not 1 <= e <= len(o.exercises)]
    if wrong or set(sections) & set(part.demo):
        raise ValueError(f"notebook {part.number} has no {', '.join(wrong)} (or teaches a demo section in full)")
    return sections, tasks


def part_minutes(o: Outline, run_seconds: float | None, part: Part) -> int:
    """``teaching_minutes`` of what ``part`` teaches: the whole run time, the reading of the frame and of the
    chosen sections and exercises, the exercises, and MINUTES_PER_DEMO per demo; rounded up to 5 minutes."""
    sections, tasks = chosen(o, part)
    read = o.frame + sum(o.sections[s] for s in sections) + sum(o.exercises[e - 1] for e in tasks)
    minutes = (run_seconds or 0) / 60 + read / READING_WORDS_PER_MIN + MINUTES_PER_EXERCISE * len(tasks) \
        + MINUTES_PER_DEMO * len(part.demo)
    return 5 * math.ceil(minutes / 5)


def part_label(title: str, o: Outline, part: Part) -> str:
    sections, tasks = chosen(o, part)
    bits = [] if sections == list(o.sections) else [f"§{spans(sections)}" if sections else "no sections"]
    if part.demo:
        bits.append(f"§{spans(part.demo)} as a demo")
    if tasks != list(range(1, len(o.exercises) + 1)):
        bits.append(f"exercise{'s' * (len(tasks) > 1)} {spans(tasks)}" if tasks else "no exercises")
    return title + (": " + ", ".join(bits) if bits else "")


# The day plans, in series order (each notebook builds on the ones before). A Part's minutes come from the
# notebook (part_minutes); tests/test_handouts.py checks that every day fits its blocks.
# Half a day: the first launch, the collectives, what a sampler does, and a first DDP model (00's walkthrough).
HALF_DAY = (Part("00", exercises=(1,)), Part("01", (1, 2), (), demo=(4,)), Part("02", (1, 2, 3), (1,)),
            Part("04", (1, 2, 3, 4), ()))
# One day, "DDP core": your script on DDP in the first hour (00), 01-03 skimmed, what DDP does (04),
# checkpoints (05) and the capstone template (08).
CORE_DAY = (Part("00", exercises=(1,)), Part("01", (1, 2, 3), (), demo=(4,)), Part("02", (1, 2, 3, 8), (1,)),
            Part("03", (1, 6, 8), ()), Part("04", (1, 2, 3, 4, 5, 6, 7), (1, 2)),
            Part("05", (1, 2, 3, 4, 5, 6, 7), (1, 2)), Part("08", exercises=(1, 2)))
# Two and three days: every notebook, each once; what is not done in class is homework.
TWO_DAYS = (
    (Part("00", exercises=(1,)), Part("01", exercises=(1,)), Part("02", exercises=(1, 2)),
     Part("03", (1, 2, 4, 5, 6, 7, 8), (1,)), Part("04", exercises=(1, 2))),
    (Part("05", exercises=(1,)), Part("06", (1, 2, 3, 4), (1,)), Part("07", exercises=(1,)),
     Part("08", exercises=(1,)), Part("09", (1, 3, 4), ()), Part("10", (1, 2), ()),
     Part("11", (1, 4), ()), Part("12", (3,), ()), Part("13", (1,), ()), Part("14", (2,), ()), Part("15", (2,), ())),
)
THREE_DAYS = (
    (Part("00"), Part("01"), Part("02"), Part("03")),
    (Part("04"), Part("05", exercises=(1, 2, 3)), Part("06", exercises=(1, 2)), Part("07", exercises=(1, 2))),
    (Part("08", exercises=(1,)), Part("09", (1, 2, 3, 4, 6, 7), (1,)), Part("10", (1, 2, 3, 4, 6), (1,)),
     Part("11", (1, 2, 4, 5), ()), Part("12", (1, 2, 3, 6), ()), Part("13", (1, 2), ()),
     Part("14", (1, 2, 4), ()), Part("15", (1, 2), ())),
)


def clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def plan(sessions: list[Session], blocks: list[tuple[str, int]]) -> tuple[list[str], list[Session]]:
    """Table rows: the notebooks in series order, as many as end within the day.

    A block is (start "HH:MM", minutes) or (name of a pause, minutes). A notebook that reaches a pause
    goes on after it (marked "continued"); each row starts at its clock time.
    """
    teaching = [(60 * int(b[:2]) + int(b[3:]), n) for b, n in blocks if b[0].isdigit()]
    pauses = [b for b in blocks if not b[0][0].isdigit()]
    rows, queue = ["| time | notebook | minutes |", "|---|---|---|"], list(sessions)
    block, now, left = 0, teaching[0][0], teaching[0][1]
    while queue and queue[0].minutes <= left + sum(n for _, n in teaching[block + 1:]):
        s = queue.pop(0)
        need, label = s.minutes, cell_text(s.title)
        while need:
            if not left:  # the pause between this block and the next
                name, length = pauses[block]
                rows.append(f"| | *{name}* | {length} |")
                block += 1
                now, left = teaching[block]
                if need < s.minutes:  # a part of it came before the pause
                    label = f"{cell_text(s.title)} (continued)"
            used = min(need, left)
            rows.append(f"| {clock(now)} | {label} | {used} |")
            now, left, need = now + used, left - used, need - used
    free = "*questions, exercises, catching up*"
    if left >= 15:
        rows.append(f"| {clock(now)} | {free} | {left} |")
    for (name, length), (start, minutes) in zip(pauses[block:], teaching[block + 1:], strict=True):
        rows += [f"| | *{name}* | {length} |", f"| {clock(start)} | {free} | {minutes} |"]
    return rows, queue


@dataclass
class Course:
    """Every notebook of the series as the plans see it: title, outline, measured run, teaching time."""
    paths: dict[str, Path]
    titles: dict[str, str]
    outlines: dict[str, Outline]
    measured: dict[str, dict]
    minutes: dict[str, int]
    cells: dict[str, int]
    exercise_counts: dict[str, int]

    @classmethod
    def read(cls, times: dict, paths: list[Path] | None = None) -> "Course":
        c = cls({}, {}, {}, {}, {}, {}, {})
        for path in paths or notebooks():
            nb, number = nbformat.read(path, as_version=4), path.name[:2]
            c.paths[number], c.titles[number], c.outlines[number] = path, title_of(nb), outline(nb)
            c.measured[number] = times["notebooks"].get(path.name, {})
            c.minutes[number] = teaching_minutes(nb, c.measured[number].get("seconds"))
            c.cells[number], c.exercise_counts[number] = len(nb.cells), len(exercises(nb))
        return c

    def session(self, part: Part) -> Session:
        o, run = self.outlines[part.number], self.measured[part.number].get("seconds")
        return Session(self.paths[part.number].stem, part_label(self.titles[part.number], o, part),
                       part_minutes(o, run, part), run)

    def left_over(self, parts: list[Part]) -> list[str]:
        """What ``parts`` leave for self-study, notebook by notebook."""
        lines = []
        for number, o in self.outlines.items():
            mine = [p for p in parts if p.number == number]
            if not mine:
                lines.append(f"- {cell_text(self.titles[number])}: all of it")
                continue
            taught = {s for p in mine for s in chosen(o, p)[0] + list(p.demo)}
            done = {e for p in mine for e in chosen(o, p)[1]}
            demo = sorted({s for p in mine for s in p.demo})
            sections = [s for s in o.sections if s not in taught]
            tasks = [e for e in range(1, len(o.exercises) + 1) if e not in done]
            bits = ([f"§{spans(sections)}"] if sections else []) \
                + ([f"the text of §{spans(demo)} (shown as a demo)"] if demo else []) \
                + ([f"exercise{'s' * (len(tasks) > 1)} {spans(tasks)}"] if tasks else [])
            if bits:
                lines.append(f"- {cell_text(self.titles[number])}: {', '.join(bits)}")
        return lines


def day_plan(course: Course, days: tuple[tuple[Part, ...], ...], blocks) -> list[str]:
    """Markdown: one table per day (a "Day N" heading when there are several), then the self-study list."""
    text, every = [], []
    if len(days) > 1:  # a notebook that lands after the plans were written: on the last day
        planned = {p.number for day in days for p in day}
        days = (*days[:-1], (*days[-1], *(Part(n) for n in sorted(course.outlines) if n not in planned)))
    for n, day in enumerate(days, 1):
        parts = [p for p in day if p.number in course.outlines]
        rows, left = plan([course.session(p) for p in parts], blocks)
        if len(days) > 1:
            text += [f"### Day {n}", ""]
        text += [*rows, ""]
        if left:
            text += ["**Does not fit in the day:** " + ", ".join(cell_text(s.title) for s in left) + ".", ""]
        every += parts
    left_over = course.left_over(every)
    text += ["**Left for self-study:**", "", *left_over, ""] if left_over else ["Nothing is left for self-study.", ""]
    return text


def reach(course: Course, parts: tuple[Part, ...]) -> str:
    """The plan's notebooks from DDP fundamentals on (04 and later), by title."""
    return ", ".join(cell_text(course.titles[p.number]) for p in parts if p.number >= "04"
                     and p.number in course.titles) or "no notebook from 04 on"


def notebook_table(course: Course) -> list[str]:
    rows = ["| # | notebook | cells | code cells run by nbval | run time, s | teaching time, min | exercises |",
            "|---|---|---|---|---|---|---|"]
    for number, title in course.titles.items():
        m = course.measured[number]
        run = f"{m['seconds']:.1f}" if m.get("seconds") is not None else "not measured"
        rows.append(f"| {number} | {cell_text(title.partition(' · ')[2])} | {course.cells[number]} | "
                    f"{m.get('cells', '–')} | {run} | {course.minutes[number]} | "
                    f"{course.exercise_counts[number]} |")
    total = sum(course.minutes.values())
    seconds = sum(m.get("seconds") or 0 for m in course.measured.values())
    rows.append(f"| | **all {len(course.titles)}** | {sum(course.cells.values())} | "
                f"{sum(m.get('cells', 0) for m in course.measured.values())} | {seconds:.1f} | "
                f"{total} ({total // 60} h {total % 60:02d}) | {sum(course.exercise_counts.values())} |")
    return rows


def venv_size() -> tuple[Path, float] | None:
    """The environment this build runs in (or the repository's .venv) and its size on disk, in GiB."""
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else ROOT / ".venv"
    if not venv.is_dir():
        return None
    size = 0
    for folder, _, files in os.walk(venv):
        for name in files:
            try:
                size += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return venv, size / 2**30


def setup_checklist(course: Course, times: dict) -> list[str]:
    """The instructor's set-up: install, offline use, ddp_helpers, the machine check. Every number is read
    from this machine, README.md, requirements.txt or notebook_times.json."""
    from importlib import metadata

    readme = (ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else ""
    pins = (ROOT / "requirements.txt").read_text() if (ROOT / "requirements.txt").exists() else ""
    download = re.search(r"installs\s+about\s+([\d.]+\s+[GMK]B)\s+of\s+packages", readme)
    ci = re.search(r"A\s+fresh\s+clone\s+on\s+(\d+)\s+idle\s+cores\s+took\s+[\d,]+\s+s:\s+install\s+(\d+)", readme)
    torch_pin = re.search(r"^torch==([^\s;]+)", pins, re.MULTILINE)  # the first: Python 3.11's
    torch_pin = torch_pin[1] if torch_pin else "the pinned version"
    try:
        torch_here = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_here = None
    size = venv_size()
    first = course.paths.get("00")
    hello = first.name if first else "00_orientation.ipynb"
    machine = times.get("machine", {})
    nbval_s = sum(m.get("seconds") or 0 for m in course.measured.values())

    install = ["**Install, a week before.** Each learner machine needs Linux, Python 3.11 (or 3.12, 3.13), "
               "`make` and a clone of the repository; `make venv` installs the pinned packages into `.venv` "
               "(`make lab` does it too, then opens JupyterLab)."]
    if download:
        install.append(f"README: the first run installs about {download[1]} of packages.")
    if size:
        where = size[0].relative_to(ROOT) if size[0].is_relative_to(ROOT) else size[0]
        install.append(f"The environment these handouts were built with (`{where}`, torch "
                       f"{torch_here or '?'}) takes {size[1]:.1f} GiB on disk; a CUDA build of torch adds the "
                       "`nvidia-*` packages to that.")
    if ci:
        install.append(f"Install time: CI's `make venv` on a fresh clone took {ci[2]} s on {ci[1]} idle cores "
                       "(README, the CI note); the download depends on the network, so time one learner "
                       "machine with `time make venv`.")
    else:
        install.append("Install time: time one learner machine with `time make venv` on a fresh clone.")
    return [
        "1. " + " ".join(install),
        "2. **Working offline.** Download before the day: the packages. Either run `make venv` on every "
        "machine while it is online, or fetch the wheels once on a machine of the same kind (Linux, Python "
        "3.11): `pip download -r requirements.txt -c requirements-py3.11.lock -d wheels` (the lock of the "
        "learners' Python; for the CPU build of "
        f"torch add `--extra-index-url https://download.pytorch.org/whl/cpu`, README: \"CPU or CUDA torch\"; "
        f"the pin on 3.11 is torch {torch_pin}), copy `wheels/` beside the clone and install with "
        "`PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheels make venv`. Nothing else is downloaded on the day: the "
        "capstone's digits ship with scikit-learn, `make lab` turns off JupyterLab's news and update checks, "
        "and these handouts load every script from `assets/` in this folder (copy the folder as it is). "
        "Build the handouts while online: the first `make handouts` installs the browser libraries with npm.",
        "3. **How learners get `ddp_helpers`.** The notebooks import `ddp_helpers` (the launcher, the worker "
        "runtime, the exercise checks) and their worker scripts import it in every rank: `make venv` installs "
        "it from the clone into `.venv` in editable mode (`pip install -e .`), so each learner needs the "
        "repository, not only the notebooks. Then either `make lab` (JupyterLab on `notebooks/`: the complete "
        "notebooks, solutions included) or the student notebooks in `student/` of this folder, opened with "
        "the same environment: `.venv/bin/jupyter lab --ServerApp.ip=127.0.0.1 <this folder>/student` from "
        "the clone. Their links (contents in `student/README.md`, the other notebooks, each section to its "
        "exercise and back) stay inside `student/`; their paths to `data/` and `cluster/` are written "
        "relative to the repository "
        "from where `make handouts` put them: move `student/` elsewhere only by building it there "
        "(`python tools/handouts.py --out <folder>`).",
        "4. **Machine check, the day before.** On each machine (or one of each kind), from the repository "
        f"root: this writes notebook 00's first worker script (`scripts/00_hello.py`, from `{hello}`) and "
        "launches it on 2 processes with `ddp_helpers.torchrun`; it ends with `machine check passed`.",
        "",
        "    ```bash",
        *[f"    {line}" for line in MACHINE_CHECK.splitlines()],
        "    ```",
        "",
        f"   For the whole course: `make test` (lint, unit tests, then strict nbval of all "
        f"{len(course.titles)} notebooks; nbval alone took {nbval_s:.0f} s on the "
        f"{machine.get('cpu_count', '?')}-CPU machine of the run times below). On a GPU box, "
        "`make gpu-check` compares the recorded launches on GPUs (nccl) with the CPU (gloo).",
    ]


# The day-before check of item 4 (the page shows it; tests/test_handouts.py checks what it names).
MACHINE_CHECK = """cd notebooks && mkdir -p scripts && ../.venv/bin/python -c "
import json, pathlib
from ddp_helpers import torchrun
cells = json.loads(pathlib.Path('00_orientation.ipynb').read_text())['cells']
src = next(''.join(c['source']) for c in cells if ''.join(c['source']).startswith('%%writefile scripts/00_hello.py'))
pathlib.Path('scripts/00_hello.py').write_text(src.split('\\n', 1)[1])
run = torchrun('scripts/00_hello.py', nproc=2, nnodes=2)
assert all(out[-1].endswith('all_reduce(rank+1)=10') for out in run.stdout.values()), run.stdout
print('machine check passed')\""""


def sections_line(o: Outline) -> str:
    return "**Sections:** " + " · ".join(f"§{n} {cell_text(h)}" for n, h in o.headings.items()) + "."


def write_instructor_page(out: Path, paths: list[Path] | None = None) -> Path:
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {"notebooks": {}, "machine": {}}
    machine, sections = times.get("machine", {}), []
    course = Course.read(times)  # the plans and the table: every notebook of the series
    for path in paths or notebooks():
        nb, number = nbformat.read(path, as_version=4), path.name[:2]
        measured = times["notebooks"].get(path.name, {})
        run = measured.get("seconds")
        run_text = (f"{run:.0f} s for {measured['cells']} cells" if run is not None else "not measured yet")
        if measured.get("passed") is False:
            run_text += ", not every cell passed (a stale stored output or a timeout)"
        if measured.get("load_average_1min") is not None:
            run_text += f" (load average {measured['load_average_1min']} at the start)"
        sections += [f"### {title_of(nb)}", "",
                     f"Run time under strict nbval: {run_text}. Teaching time: about "
                     f"{teaching_minutes(nb, run)} min. Handouts: {links(path.stem, 'student', True)} "
                     f"(student), {links(path.stem, 'instructor', True)} (instructor), "
                     f"[slides](slides/{path.stem}.slides.html).", "",
                     sections_line(course.outlines.get(number) or outline(nb)), "",
                     "**Objectives**", "", *[f"- {o}" for o in objectives(nb)], "",
                     "**Exercises**", "", *[f"{i}. {e}" for i, e in enumerate(exercises(nb), 1)], ""]
    day_minutes = sum(n for b, n in FULL_DAY_BLOCKS if b[0].isdigit())
    total = sum(course.minutes.values())
    text = "\n".join([
        "# Instructor page", "",
        INSTRUCTOR_BANNER, "",
        "[Back to the handouts](index.html)", "",
        "Pages for every learner, linked from every notebook's navigation line (hand them out, or print them, "
        "with the first notebook): " + ", ".join(
            f"[{text.lower()}](html/student/{Path(name).stem}.html)" for name, text in LEARNER_PAGES.items())
        + ". The cheat sheet's script is `templates/minimal_ddp.py`, tested like the notebooks.", "",
        f"Run times: strict nbval of each notebook, from {machine.get('source', 'no measurement')}, "
        f"measured on {machine.get('date', '?')} on a {machine.get('cpu_count', '?')}-CPU machine "
        "(`tools/notebook_times.json`); refresh them with `python tools/notebook_times.py` on an idle "
        "machine after a notebook changes. A load average above the CPU count means the machine was "
        "shared and the time is longer than a learner's.", "",
        f"Teaching time of a notebook: its run time, plus reading its text and code at "
        f"{READING_WORDS_PER_MIN} words a minute, plus {MINUTES_PER_EXERCISE} minutes per exercise, "
        f"rounded up to 5 minutes: {total} min ({total // 60} h {total % 60:02d}) for the whole series, "
        f"against {day_minutes} min of teaching in a day. So the plans choose: a part of a notebook "
        "(\"§1–3\") is taught from its numbered sections, with the frame (title, objectives, summary) and the "
        f"whole run time; a section \"as a demo\" counts {MINUTES_PER_DEMO} minutes (run it and show its "
        "pictures; the text is left to read); exercises not done in class are homework. The plans take the "
        "notebooks in series order (each builds on the ones before); a notebook that reaches a pause goes on "
        "after it.", "",
        "## Set-up checklist", "", *setup_checklist(course, times), "",
        "## The notebooks at a glance", "", *notebook_table(course), "",
        "## Full-day plan: DDP core", "",
        f"One day that reaches DDP itself: {reach(course, CORE_DAY)}. A notebook shown with sections (§) is "
        "cut to them, and the exercises not named are homework.", "",
        *day_plan(course, (CORE_DAY,), FULL_DAY_BLOCKS),
        "## Half-day plan", "",
        f"From the first launch to a first DDP model: {reach(course, HALF_DAY)}.", "",
        *day_plan(course, (HALF_DAY,), HALF_DAY_BLOCKS),
        "## Two-day plan", "", "Every notebook, the later ones to their main sections.", "",
        *day_plan(course, TWO_DAYS, FULL_DAY_BLOCKS),
        "## Three-day plan", "", "Every notebook with its sections, most exercises in class.", "",
        *day_plan(course, THREE_DAYS, FULL_DAY_BLOCKS),
        "## Each notebook", "", *sections])
    return write_page(out / "instructor.html", "DDP workshop: instructor page", text)
