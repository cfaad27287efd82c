"""Regenerate the binary/text files that tasks download (envs/osworld/task_files/): run once after
editing, commit the outputs. `python envs/osworld/task_files/build_task_files.py`

Owns the content of every shipped input and expected file except site/ (hand-written HTML). Files are
named as the last path segment of the `url` a task's download / cloud_file step gives (no internet).
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
from docx import Document
from pptx import Presentation

HERE = Path(__file__).resolve().parent


def xlsx(name: str, rows: list[list], sheet: str = "Sheet1") -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = sheet
    for r in rows:
        ws.append(r)
    wb.save(HERE / name)


def docx(name: str, paragraphs: list[str]) -> None:
    d = Document()
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(HERE / name)


def text(name: str, content: str) -> None:
    (HERE / name).write_text(content)


BUDGET = [["Item", "Cost"], ["Rent", 40], ["Food", 30], ["Travel", 20], ["Books", 10]]
LETTER = ["Dear team,", "The meeting is on Monday at noon.", "Please bring your notes.", "Regards,", "Ana"]


def main() -> None:
    # --- os ---
    rows = ["id,city,temp"] + [f"{i},City{i % 7},{10 + (i * 3) % 17}" for i in range(1, 43)]
    text("weather.csv", "\n".join(rows) + "\n")
    text("weather_rows_expected.txt", "42\n")
    names = ["Mallory", "alice", "Trent", "Bob", "Carol", "Eve", "Dave", "Peggy", "Victor", "Oscar"]
    text("names.txt", "\n".join(names) + "\n")
    text("names_sorted_expected.txt", "\n".join(sorted(names)) + "\n")
    # --- text editor ---
    text("todo.txt", "write report\ncall Alice\nwater plants\n")
    text("todo_expected.txt", "write report\ncall Alice\nwater plants\nbuy milk\n")
    text("greeting.txt", "Helo wrld, this is Bunshin.\n")
    text("greeting_expected.txt", "Hello world, this is Bunshin.\n")
    text("draft.txt", "DRAFT - do not share\nQuarterly numbers are up.\nCosts are down.\n")
    text("draft_expected.txt", "Quarterly numbers are up.\nCosts are down.\n")
    text("people.csv", "Ada,36\nAlan,41\nGrace,45\n")
    text("people_expected.csv", "name,age\nAda,36\nAlan,41\nGrace,45\n")
    text("config.ini", "[server]\nport = 8080\nhost = localhost\n")
    text("config_expected.ini", "[server]\nport = 9090\nhost = localhost\n")
    text("meeting_expected.txt", "Meeting at 10:00 in room 4\n")
    # --- calc ---
    xlsx("budget.xlsx", BUDGET)
    xlsx("budget_row_expected.xlsx", BUDGET + [["Paper", 12]])
    xlsx("empty.xlsx", [])
    xlsx("inventory_expected.xlsx", [["Product", "Qty"], ["Pens", 120], ["Pads", 45], ["Clips", 300]])
    text("scores.csv", "name,score\nAlice,88\nBob,75\nCarol,93\n")
    text("scores_expected.csv", "name,score\nAlice,88\nBob,91\nCarol,93\n")
    # --- writer ---
    docx("letter.docx", LETTER)
    docx("letter_append_expected.docx", LETTER + ["Thank you."])
    docx("letter_greeting_expected.docx", ["Dear colleagues,"] + LETTER[1:])
    docx("letter_delete_expected.docx", [p for p in LETTER if p != "Please bring your notes."])
    docx("letter_title_expected.docx", ["Invitation"] + LETTER)
    docx("blank.docx", [])
    docx("notes_expected.docx", ["Bunshin notes", "Snapshots are cheap."])
    # --- impress ---
    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[0])  # one title slide, its placeholders empty
    deck.save(HERE / "blank.pptx")


if __name__ == "__main__":
    main()
