"""Regenerate the files this project's OSWorld tasks download: run once after editing, commit the outputs.
`python envs/osworld/judge_files/build_task_files.py`

Owns the content of every shipped input file (envs/osworld/task_files/: what a task gives the agent; it is in
every workspace) and expected file (envs/osworld/judge_files/, beside this script: what only the judge reads;
never in a workspace, see .workspace-exclude), except task_files/site/ (hand-written HTML). Files are named as
the last path segment of the `url` a task's download / cloud_file step gives (no internet). This script holds
the expected contents, so it lives with the judge's files.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
from docx import Document
from pptx import Presentation

JUDGE = Path(__file__).resolve().parent
GIVEN = JUDGE.parent / "task_files"


def xlsx(folder: Path, name: str, rows: list[list], sheet: str = "Sheet1") -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = sheet
    for r in rows:
        ws.append(r)
    wb.save(folder / name)


def docx(folder: Path, name: str, paragraphs: list[str]) -> None:
    d = Document()
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(folder / name)


def text(folder: Path, name: str, content: str) -> None:
    (folder / name).write_text(content)


BUDGET = [["Item", "Cost"], ["Rent", 40], ["Food", 30], ["Travel", 20], ["Books", 10]]
LETTER = ["Dear team,", "The meeting is on Monday at noon.", "Please bring your notes.", "Regards,", "Ana"]


def main() -> None:
    # --- os ---
    rows = ["id,city,temp"] + [f"{i},City{i % 7},{10 + (i * 3) % 17}" for i in range(1, 43)]
    text(GIVEN, "weather.csv", "\n".join(rows) + "\n")
    text(JUDGE, "weather_rows_expected.txt", "42\n")
    names = ["Mallory", "alice", "Trent", "Bob", "Carol", "Eve", "Dave", "Peggy", "Victor", "Oscar"]
    text(GIVEN, "names.txt", "\n".join(names) + "\n")
    text(JUDGE, "names_sorted_expected.txt", "\n".join(sorted(names)) + "\n")
    # --- text editor ---
    text(GIVEN, "todo.txt", "write report\ncall Alice\nwater plants\n")
    text(JUDGE, "todo_expected.txt", "write report\ncall Alice\nwater plants\nbuy milk\n")
    text(GIVEN, "greeting.txt", "Helo wrld, this is Bunshin.\n")
    text(JUDGE, "greeting_expected.txt", "Hello world, this is Bunshin.\n")
    text(GIVEN, "draft.txt", "DRAFT - do not share\nQuarterly numbers are up.\nCosts are down.\n")
    text(JUDGE, "draft_expected.txt", "Quarterly numbers are up.\nCosts are down.\n")
    text(GIVEN, "people.csv", "Ada,36\nAlan,41\nGrace,45\n")
    text(JUDGE, "people_expected.csv", "name,age\nAda,36\nAlan,41\nGrace,45\n")
    text(GIVEN, "config.ini", "[server]\nport = 8080\nhost = localhost\n")
    text(JUDGE, "config_expected.ini", "[server]\nport = 9090\nhost = localhost\n")
    text(JUDGE, "meeting_expected.txt", "Meeting at 10:00 in room 4\n")
    # --- calc ---
    xlsx(GIVEN, "budget.xlsx", BUDGET)
    xlsx(JUDGE, "budget_row_expected.xlsx", BUDGET + [["Paper", 12]])
    xlsx(GIVEN, "empty.xlsx", [])
    xlsx(JUDGE, "inventory_expected.xlsx", [["Product", "Qty"], ["Pens", 120], ["Pads", 45], ["Clips", 300]])
    text(GIVEN, "scores.csv", "name,score\nAlice,88\nBob,75\nCarol,93\n")
    text(JUDGE, "scores_expected.csv", "name,score\nAlice,88\nBob,91\nCarol,93\n")
    # --- writer ---
    docx(GIVEN, "letter.docx", LETTER)
    docx(JUDGE, "letter_append_expected.docx", LETTER + ["Thank you."])
    docx(JUDGE, "letter_greeting_expected.docx", ["Dear colleagues,"] + LETTER[1:])
    docx(JUDGE, "letter_delete_expected.docx", [p for p in LETTER if p != "Please bring your notes."])
    docx(JUDGE, "letter_title_expected.docx", ["Invitation"] + LETTER)
    docx(GIVEN, "blank.docx", [])
    docx(JUDGE, "notes_expected.docx", ["Bunshin notes", "Snapshots are cheap."])
    # --- impress ---
    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[0])  # one title slide, its placeholders empty
    deck.save(GIVEN / "blank.pptx")


if __name__ == "__main__":
    main()
