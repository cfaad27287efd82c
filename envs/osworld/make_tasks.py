"""Source of the shipped OSWorld-schema tasks (envs/osworld/tasks/*.json) and their oracle trajectories
(envs/osworld/oracles/*.json). The JSON files are what the env loads; this script is how they are written.
Edit here, then run `python -m envs.osworld.make_tasks`; tests/osworld checks the committed files match.

Oracles are pyautogui code strings as an agent would send them: keyboard shortcuts and typing (paths typed
with `~`, never the host's HOME), ending in DONE.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent
T = _HERE / "tasks"
O = _HERE / "oracles"
URL = "https://files.bunshin.example/osworld/"
SITE = "http://127.0.0.1:18765/"
H = "/home/user"
_SPECS: list[tuple[str, dict, list]] = []  # (id, task JSON, oracle), in the order written below

# helpers: config steps, getters and oracle steps in OSWorld's JSON shapes
def dl(name, path): return {"type": "download", "parameters": {"files": [{"url": URL + name, "path": path}]}}
def sh(cmd): return {"type": "execute", "parameters": {"command": cmd, "shell": True}}
TERM = [{"type": "launch", "parameters": {"command": ["xterm"]}},
        {"type": "activate_window", "parameters": {"window_name": "xterm", "by_class": True}}]
def typ(s, after=0.6): return f"pyautogui.typewrite({s!r}, interval=0.01); time.sleep({after})"
def cmdline(cmd): return {"type": "vm_command_line", "command": cmd, "shell": True}
def rule(v): return {"type": "rule", "rules": v}
def vmfile(path): return {"type": "vm_file", "path": path, "dest": os.path.basename(path)}
def cloud(name): return {"type": "cloud_file", "path": URL + name, "dest": name}
def openf(path): return {"type": "open", "parameters": {"path": path}}
CHROME = [{"type": "http_server", "parameters": {"directory": "site", "port": 18765}},
          {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337", SITE + "index.html"]}},
          {"type": "activate_window", "parameters": {"window_name": "Chromium", "by_class": True}},
          {"type": "sleep", "parameters": {"seconds": 1}}]

def task(tid, instruction, config, evaluator, apps, oracle, snapshot=None, source="bunshin-gym"):
    _SPECS.append((tid, {"id": tid, "snapshot": snapshot or apps[0], "instruction": instruction, "source": source,
        "config": config, "trajectory": "trajectories/", "related_apps": apps, "evaluator": evaluator}, oracle))

# ---------------- os (terminal) ----------------
task("os-mkdir-nested", "Create the nested directory projects/alpha/src inside my Desktop folder.",
     TERM, {"func": "exact_match", "result": cmdline(f"[ -d {H}/Desktop/projects/alpha/src ] && echo yes || echo no"),
            "expected": rule({"expected": "yes\n"})}, ["os", "terminal"],
     [typ("mkdir -p ~/Desktop/projects/alpha/src\n"), "DONE"])
task("os-chmod-script", "Set the permissions of ~/Desktop/run.sh to 755 so that everyone can execute it.",
     [sh(f"printf '#!/bin/sh\\necho hello\\n' > {H}/Desktop/run.sh && chmod 644 {H}/Desktop/run.sh")] + TERM,
     {"func": "exact_match", "result": cmdline(f"stat -c %a {H}/Desktop/run.sh"), "expected": rule({"expected": "755\n"})},
     ["os", "terminal"], [typ("chmod 755 ~/Desktop/run.sh\n"), "DONE"])
task("os-rename-file", "Rename ~/Documents/notes.txt to notes-2024.txt (same folder).",
     [sh(f"echo 'remember the milk' > {H}/Documents/notes.txt")] + TERM,
     {"func": ["check_include_exclude", "exact_match"],
      "result": [cmdline(f"ls -1 {H}/Documents"), cmdline(f"cat {H}/Documents/notes-2024.txt")],
      "expected": [rule({"include": ["notes-2024.txt"], "exclude": ["notes.txt"]}), rule({"expected": "remember the milk\n"})],
      "conj": "and"},
     ["os", "terminal"], [typ("mv ~/Documents/notes.txt ~/Documents/notes-2024.txt\n"), "DONE"])
task("os-count-rows", "~/Documents/weather.csv has a header line. Write the number of data rows (without the header) into ~/Desktop/rows.txt, nothing but the number.",
     [dl("weather.csv", f"{H}/Documents/weather.csv")] + TERM,
     {"func": "compare_text_file", "result": vmfile(f"{H}/Desktop/rows.txt"), "expected": cloud("weather_rows_expected.txt"),
      "options": {"ignore_blanks": True}},
     ["os", "terminal"], [typ("tail -n +2 ~/Documents/weather.csv | wc -l > ~/Desktop/rows.txt\n"), "DONE"])
task("os-delete-tmp", "Delete every .tmp file in ~/Desktop/cache but keep all other files there.",
     [sh(f"mkdir -p {H}/Desktop/cache && cd {H}/Desktop/cache && touch a.tmp b.tmp c.tmp keep.log && echo data > notes.md")] + TERM,
     {"func": "exact_match", "result": cmdline(f"ls -1 {H}/Desktop/cache"), "expected": rule({"expected": "keep.log\nnotes.md\n"})},
     ["os", "terminal"], [typ("rm ~/Desktop/cache/*.tmp\n"), "DONE"])
task("os-symlink", "Create a symbolic link named latest on my Desktop that points to ~/Documents/report-v3.txt.",
     [sh(f"echo v3 > {H}/Documents/report-v3.txt && echo v2 > {H}/Documents/report-v2.txt")] + TERM,
     {"func": "exact_match", "result": cmdline(f"[ -L {H}/Desktop/latest ] && basename \"$(readlink -f {H}/Desktop/latest)\""),
      "expected": rule({"expected": "report-v3.txt\n"})},
     ["os", "terminal"], [typ("ln -s ~/Documents/report-v3.txt ~/Desktop/latest\n"), "DONE"])
task("os-archive-folder", "Make a gzip-compressed tar archive ~/Desktop/photos.tar.gz of the folder ~/Documents/photos; paths inside the archive must start with photos/.",
     [sh(f"mkdir -p {H}/Documents/photos && cd {H}/Documents/photos && echo a > beach.jpg && echo b > hills.jpg")] + TERM,
     {"func": "check_include_exclude", "result": cmdline(f"tar tzf {H}/Desktop/photos.tar.gz"),
      "expected": rule({"include": ["photos/beach.jpg", "photos/hills.jpg"], "exclude": ["Documents/"]})},
     ["os", "terminal"], [typ("tar czf ~/Desktop/photos.tar.gz -C ~/Documents photos\n", 1.0), "DONE"])
task("os-sort-names", "Sort the lines of ~/Documents/names.txt in plain byte order (as LC_ALL=C sort does) and save the result as ~/Documents/names_sorted.txt.",
     [{"type": "upload_file", "parameters": {"files": [{"local_path": "names.txt", "path": f"{H}/Documents/names.txt"}]}}] + TERM,
     {"func": "compare_text_file", "result": vmfile(f"{H}/Documents/names_sorted.txt"), "expected": cloud("names_sorted_expected.txt")},
     ["os", "terminal"], [typ("LC_ALL=C sort ~/Documents/names.txt > ~/Documents/names_sorted.txt\n"), "DONE"])
task("os-json-setting", "In the settings file ~/.config/notes-app/settings.json, change the theme from light to dark. Leave the other settings as they are.",
     [sh(f"mkdir -p {H}/.config/notes-app && printf '{{\"theme\": \"light\", \"font_size\": 12, \"autosave\": true}}\\n' > {H}/.config/notes-app/settings.json")] + TERM,
     {"func": "check_json", "result": vmfile(f"{H}/.config/notes-app/settings.json"),
      "expected": rule({"expect": [{"key": ["theme"], "method": "eq", "ref": "dark"}, {"key": ["font_size"], "method": "eq", "ref": 12},
                                   {"key": ["autosave"], "method": "eq", "ref": True}]})},
     ["os", "terminal"], [typ("sed -i 's/\"light\"/\"dark\"/' ~/.config/notes-app/settings.json\n"), "DONE"])
task("os-show-secret", "Show the content of ~/Documents/secret.txt in the terminal.",
     [sh(f"echo 'token BUNSHIN-7431' > {H}/Documents/secret.txt")] + TERM,
     {"func": "check_include_exclude", "result": {"type": "vm_terminal_output"}, "expected": rule({"include": ["BUNSHIN-7431"]})},
     ["os", "terminal"], [typ("cat ~/Documents/secret.txt\n", 1.0), "DONE"])
task("os-largest-file", "Find the largest file in ~/Documents/logs and write its file name (only the name) into ~/Desktop/largest.txt.",
     [sh(f"mkdir -p {H}/Documents/logs && cd {H}/Documents/logs && head -c 300 /dev/zero > app.log && head -c 5000 /dev/zero > db.log && head -c 90 /dev/zero > web.log")] + TERM,
     {"func": ["file_contains", "check_include_exclude"], "result": [vmfile(f"{H}/Desktop/largest.txt"), cmdline(f"cat {H}/Desktop/largest.txt")],
      "expected": [rule({"expected": ["db.log"]}), rule({"include": ["db.log"], "exclude": ["app.log", "web.log"]})]},
     ["os", "terminal"], [typ("ls -S ~/Documents/logs | head -n 1 > ~/Desktop/largest.txt\n"), "DONE"])

# ---------------- text editor (mousepad) ----------------
def ed_open(name, path): return [dl(name, path), {"type": "launch", "parameters": {"command": ["mousepad", path]}},
                                  {"type": "activate_window", "parameters": {"window_name": os.path.basename(path)}}]
task("edit-append-line", "In the text editor, add a last line 'buy milk' to my to-do list and save the file.",
     ed_open("todo.txt", f"{H}/Documents/todo.txt"),
     {"func": "compare_text_file", "result": vmfile(f"{H}/Documents/todo.txt"), "expected": cloud("todo_expected.txt")},
     ["mousepad"], ["pyautogui.hotkey('ctrl', 'End'); " + typ("buy milk\n", 0.3), "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"])
task("edit-fix-typos", "Fix the two typos in the open file (it should read 'Hello world, this is Bunshin.') and save it.",
     ed_open("greeting.txt", f"{H}/Documents/greeting.txt"),
     {"func": "compare_text_file", "result": vmfile(f"{H}/Documents/greeting.txt"), "expected": cloud("greeting_expected.txt"),
      "options": {"ignore_blanks": True}},
     ["mousepad"], ["pyautogui.hotkey('ctrl', 'a'); " + typ("Hello world, this is Bunshin.\n", 0.3), "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"])
task("edit-delete-first-line", "Remove the first line (the DRAFT marker) from the open document and save it.",
     ed_open("draft.txt", f"{H}/Documents/draft.txt"),
     {"func": "compare_text_file", "result": vmfile(f"{H}/Documents/draft.txt"), "expected": cloud("draft_expected.txt")},
     ["mousepad"], ["pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('shift', 'down'); pyautogui.press('delete'); time.sleep(0.3)",
                    "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"])
task("edit-csv-header", "Add the header line name,age at the top of ~/Documents/people.csv (open in the editor) and save.",
     ed_open("people.csv", f"{H}/Documents/people.csv"),
     {"func": "compare_csv", "result": vmfile(f"{H}/Documents/people.csv"), "expected": cloud("people_expected.csv")},
     ["mousepad"], ["pyautogui.hotkey('ctrl', 'Home'); " + typ("name,age\n", 0.3), "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"])
task("edit-change-port", "In the open config.ini, change the server port from 8080 to 9090 and save.",
     ed_open("config.ini", f"{H}/.config/config.ini"),
     {"func": "compare_text_file", "result": vmfile(f"{H}/.config/config.ini"), "expected": cloud("config_expected.ini")},
     ["mousepad"], ["pyautogui.hotkey('ctrl', 'Home'); pyautogui.press('down'); pyautogui.press('end'); pyautogui.hotkey('ctrl', 'shift', 'left'); " + typ("9090", 0.3),
                    "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"])
task("edit-new-file", "Write 'Meeting at 10:00 in room 4' in the text editor and save it as meeting.txt on my Desktop.",
     [{"type": "launch", "parameters": {"command": ["mousepad"]}}, {"type": "activate_window", "parameters": {"window_name": "Mousepad", "by_class": True}}],
     {"func": "compare_text_file", "result": vmfile(f"{H}/Desktop/meeting.txt"), "expected": cloud("meeting_expected.txt"), "options": {"ignore_blanks": True}},
     ["mousepad"], [typ("Meeting at 10:00 in room 4\n", 0.3), "pyautogui.hotkey('ctrl', 's'); time.sleep(1.5)",
                    "import os; pyautogui.hotkey('ctrl', 'a'); pyautogui.typewrite(os.path.expanduser('~/Desktop/meeting.txt'), interval=0.01); time.sleep(0.3); pyautogui.press('enter'); time.sleep(1)", "DONE"])

task("edit-type-unsaved", "In the open text editor, type the line: hello bunshin (no need to save).",
     [{"type": "launch", "parameters": {"command": ["mousepad"]}}, {"type": "activate_window", "parameters": {"window_name": "Mousepad", "by_class": True}}],
     {"func": "check_accessibility_tree", "result": {"type": "accessibility_tree"},
      "expected": rule([{"xpath": "//application[@name='mousepad']//text[contains(., 'hello bunshin')]"}])},
     ["mousepad"], [typ("hello bunshin", 0.5), "DONE"])
task("files-new-folder", "Using the file manager that shows my Documents folder, create a new folder named Archive there.",
     [{"type": "launch", "parameters": {"command": ["pcmanfm", f"{H}/Documents"]}},
      {"type": "activate_window", "parameters": {"window_name": "Documents"}}],
     {"func": "exact_match", "result": cmdline(f"[ -d {H}/Documents/Archive ] && echo yes || echo no"), "expected": rule({"expected": "yes\n"})},
     ["pcmanfm"], ["pyautogui.hotkey('ctrl', 'shift', 'n'); time.sleep(1.5)", "pyautogui.hotkey('ctrl', 'a'); " + typ("Archive\n", 1.0), "DONE"])

# ---------------- calc ----------------
def calc_open(name, path): return [dl(name, path), openf(path)]
#: oracle code: `activity()` sums the CPU ticks of every thread in the desktop (the processes of this action's pid
#: namespace: a workspace's, or the host's for a host desktop; not kernel threads, not this action nor its
#: parent) and says whether one is runnable or in disk wait; `wait_idle()` returns once the desktop ran nothing
#: for 0.3 s (at most 10 s)
ACTIVITY = ("import glob, os\n"
            "mine = {str(os.getpid()), str(os.getppid())}\n"
            "here, ns = os.readlink('/proc/self/ns/pid'), {}\n"
            "def desktop(pid):\n"
            "    if pid not in ns:\n"
            "        try:\n            ns[pid] = pid not in mine and os.readlink(f'/proc/{pid}/ns/pid') == here\n"
            "        except OSError:\n            ns[pid] = False\n"
            "    return ns[pid]\n"
            "def activity():\n"
            "    ticks, running = 0, False\n"
            "    for stat in glob.glob('/proc/[0-9]*/task/[0-9]*/stat'):\n"
            "        if not desktop(stat.split('/')[2]):\n            continue\n"
            "        try:\n            f = open(stat).read().rsplit(')', 1)[1].split()\n"
            "        except OSError:\n            continue\n"
            "        if int(f[6]) & 0x200000:  # PF_KTHREAD\n            continue\n"
            "        ticks, running = ticks + int(f[11]) + int(f[12]), running or f[0] in 'RD'\n"
            "    return ticks, running\n")
WAIT_IDLE = ("def wait_idle():\n"
             "    last, quiet = activity()[0], 0\n"
             "    for _ in range(100):\n"
             "        time.sleep(0.1)\n"
             "        ticks, running = activity()\n"
             "        quiet, last = (0 if running or ticks != last else quiet + 1), ticks\n"
             "        if quiet == 3:\n            return\n")
def keys_then_type(keys, s, after=0.5):
    """Press `keys` (pyautogui calls that move the cursor), then type `s`, each once LibreOffice has handled
    what came before. Measured: with its CPU capped (4 desktops under a 0.6-core quota), Calc handled the
    arrow/Tab keys pressed just before typing *after* the typed text, 9 of 12 oracle runs typed into the
    wrong cells and scored 0; waiting for the desktop to go idle between them, 53 of 53 scored 1."""
    return ACTIVITY + WAIT_IDLE + f"{keys}\nwait_idle()\npyautogui.typewrite({s!r}, interval=0.01)\nwait_idle()\ntime.sleep({after})"
def save(path):
    """Ctrl+S, then wait (up to 50 s, within the action's 60 s) until the file's mtime changes: a fixed sleep
    lost saves under load, and with 8 desktops on 2 cores an .xlsx save can take over 30 s. A save that does
    not happen raises: Writer's accessibility tree is the same saved or not, so this error is what tells a
    replay whose save was lost from its recording (the replay checks each call's last_action_error). When
    nothing else in the desktop runs for 5 s (no CPU tick, no thread runnable or in disk wait), no save is
    coming (a menu or dialog took the keys): it raises then instead of waiting out the 50 s."""
    return (ACTIVITY + f"p = os.path.expanduser({path!r})\nm = os.stat(p).st_mtime_ns\n"
            "pyautogui.hotkey('ctrl', 's')\nlast, quiet = activity()[0], 0\nfor _ in range(250):\n    time.sleep(0.2)\n"
            "    if os.stat(p).st_mtime_ns != m:\n        break\n"
            "    ticks, running = activity()\n"
            "    quiet, last = (0 if running or ticks - last > 1 else quiet + 1), ticks\n"
            "    if quiet == 25:\n"
            "        raise TimeoutError('the file was not written: nothing ran in the desktop for 5 s after Ctrl+S')\n"
            "else:\n    raise TimeoutError('the file was not written within 50 s of Ctrl+S')\ntime.sleep(1)")
def wait_window(title):
    """Wait (up to 30 s) until a window with this title is mapped, e.g. Calc's after an import dialog."""
    return ("import subprocess\nfor _ in range(150):\n"
            f"    if subprocess.run(['xdotool', 'search', '--onlyvisible', '--name', {title!r}]).returncode == 0:\n"
            "        break\n    time.sleep(0.2)\ntime.sleep(1)")
task("calc-sum-total", "In ~/Documents/budget.xlsx (open in Calc), write Total in A6 and the sum of B2:B5 in B6, then save the file in its current format.",
     calc_open("budget.xlsx", f"{H}/Documents/budget.xlsx"),
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/budget.xlsx"),
      "options": {"rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": "A6", "props": {"value": {"method": "eq", "ref": "Total"}}},
                            {"type": "check_cell", "sheet_idx": 0, "coordinate": "B6", "props": {"value": {"method": "approx:0.001", "ref": 100}}}]}},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('ctrl', 'down'); pyautogui.press('down')", "Total\t=SUM(B2:B5)\n", 0.5), save('~/Documents/budget.xlsx'), "DONE"])
task("calc-double-column", "In the open budget.xlsx, put the header Double in C1 and, in C2:C5, twice the cost of each row. Save in the current format.",
     calc_open("budget.xlsx", f"{H}/Documents/budget.xlsx"),
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/budget.xlsx"),
      "options": {"rules": [{"type": "check_cell", "sheet_idx": "RI0", "coordinate": "C1", "props": {"value": {"method": "eq", "ref": "Double"}}}] +
                           [{"type": "check_cell", "sheet_idx": "RI0", "coordinate": f"C{r}", "props": {"value": {"method": "approx:0.001", "ref": v}}}
                            for r, v in ((2, 80), (3, 60), (4, 40), (5, 20))]}},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('ctrl', 'right'); pyautogui.press('right')", "Double\n=B2*2\n=B3*2\n=B4*2\n=B5*2\n", 0.5), save('~/Documents/budget.xlsx'), "DONE"])
task("calc-add-row", "Add a new row at the bottom of the table in budget.xlsx with item Paper and cost 12, then save in the current format.",
     calc_open("budget.xlsx", f"{H}/Documents/budget.xlsx"),
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/budget.xlsx"), "expected": cloud("budget_row_expected.xlsx"),
      "options": {"rules": [{"type": "sheet_name"}, {"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('ctrl', 'down'); pyautogui.press('down')", "Paper\t12\n", 0.5), save('~/Documents/budget.xlsx'), "DONE"])
task("calc-average", "In budget.xlsx, write the label Average in D1 and the average cost of B2:B5 in E1. Save in the current format.",
     calc_open("budget.xlsx", f"{H}/Documents/budget.xlsx"),
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/budget.xlsx"),
      "options": {"rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": "D1", "props": {"value": {"method": "eq", "ref": "Average"}}},
                            {"type": "check_cell", "sheet_idx": 0, "coordinate": "E1", "props": {"value": {"method": "approx:0.001", "ref": 25}}}]}},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('ctrl', 'right'); pyautogui.press('right'); pyautogui.press('tab')", "Average\t=AVERAGE(B2:B5)\n", 0.5), save('~/Documents/budget.xlsx'), "DONE"])
task("calc-fill-inventory", "Fill the empty sheet of ~/Documents/inventory.xlsx with the table: header Product, Qty; rows Pens 120, Pads 45, Clips 300 (starting at A1). Save in the current format.",
     [dl("empty.xlsx", f"{H}/Documents/inventory.xlsx"), openf(f"{H}/Documents/inventory.xlsx")],
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/inventory.xlsx"), "expected": cloud("inventory_expected.xlsx"),
      "options": {"rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home')", "Product\tQty\nPens\t120\nPads\t45\nClips\t300\n", 0.5), save('~/Documents/inventory.xlsx'), "DONE"])
task("calc-rename-header", "In the open budget.xlsx, rename the column header Cost (B1) to Amount.",
     calc_open("budget.xlsx", f"{H}/Documents/budget.xlsx"),
     {"func": "compare_table", "result": vmfile(f"{H}/Documents/budget.xlsx"),
      "options": {"rules": [{"type": "check_cell", "sheet_idx": 0, "coordinate": "B1", "props": {"value": {"method": "eq", "ref": "Amount"}}},
                            {"type": "check_cell", "sheet_idx": 0, "coordinate": "B2", "props": {"value": {"method": "eq", "ref": 40}}}]},
      "postconfig": [{"type": "activate_window", "parameters": {"window_name": "budget.xlsx - LibreOffice Calc", "strict": True}},
                     {"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui; import time; pyautogui.hotkey('ctrl', 's'); time.sleep(0.5);"]}},
                     {"type": "sleep", "parameters": {"seconds": 1.5}}]},
     ["libreoffice_calc"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.press('right')", "Amount\n", 0.5), "DONE"])
task("calc-edit-csv", "Bob's score in ~/Documents/scores.csv should be 91. Fix it in Calc and save the file as CSV.",
     [dl("scores.csv", f"{H}/Documents/scores.csv"), openf(f"{H}/Documents/scores.csv")],
     {"func": "compare_csv", "result": vmfile(f"{H}/Documents/scores.csv"), "expected": cloud("scores_expected.csv"), "options": {"strict": False}},
     ["libreoffice_calc"], ["time.sleep(1); pyautogui.press('enter'); time.sleep(1)", wait_window("scores.csv - LibreOffice Calc"),
                            keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.press('down'); pyautogui.press('right'); pyautogui.press('down')", "91\n", 0.5), save('~/Documents/scores.csv'), "DONE"])

# ---------------- writer ----------------
def wr_open(): return [dl("letter.docx", f"{H}/Documents/letter.docx"), openf(f"{H}/Documents/letter.docx")]
task("writer-append-paragraph", "Add a new last paragraph 'Thank you.' to the letter open in Writer and save it as .docx.",
     wr_open(), {"func": "compare_docx_files", "result": vmfile(f"{H}/Documents/letter.docx"), "expected": cloud("letter_append_expected.docx")},
     ["libreoffice_writer"], [keys_then_type("pyautogui.hotkey('ctrl', 'End'); pyautogui.press('enter')", "Thank you.", 0.3), save('~/Documents/letter.docx'), "DONE"])
task("writer-change-greeting", "Change the greeting of the letter from 'Dear team,' to 'Dear colleagues,' and save it (keep .docx).",
     wr_open(), {"func": "compare_docx_files", "result": vmfile(f"{H}/Documents/letter.docx"), "expected": cloud("letter_greeting_expected.docx"),
                 "options": {"ignore_blanks": False}},
     ["libreoffice_writer"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home'); pyautogui.hotkey('shift', 'end')", "Dear colleagues,", 0.3), save('~/Documents/letter.docx'), "DONE"])
task("writer-delete-paragraph", "Delete the paragraph 'Please bring your notes.' from the letter and save it (keep .docx).",
     wr_open(), {"func": "compare_docx_files", "result": vmfile(f"{H}/Documents/letter.docx"), "expected": cloud("letter_delete_expected.docx"),
                 "options": {"ignore_blanks": False}},
     ["libreoffice_writer"], ["pyautogui.hotkey('ctrl', 'Home'); pyautogui.press('down'); pyautogui.press('end'); pyautogui.press('down'); pyautogui.press('home'); pyautogui.hotkey('shift', 'down'); pyautogui.press('delete'); time.sleep(0.3)", save('~/Documents/letter.docx'), "DONE"])
task("writer-insert-title", "Insert a new first paragraph 'Invitation' at the top of the letter and save it (keep .docx).",
     wr_open(), {"func": "compare_docx_files", "result": vmfile(f"{H}/Documents/letter.docx"), "expected": cloud("letter_title_expected.docx"),
                 "options": {"ignore_blanks": False}},
     ["libreoffice_writer"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home')", "Invitation\n", 0.3), save('~/Documents/letter.docx'), "DONE"])
task("writer-write-notes", "Write two paragraphs into the empty document ~/Documents/notes.docx: 'Bunshin notes' and 'Snapshots are cheap.' Save it as .docx.",
     [dl("blank.docx", f"{H}/Documents/notes.docx"), openf(f"{H}/Documents/notes.docx")],
     {"func": "compare_docx_files", "result": vmfile(f"{H}/Documents/notes.docx"), "expected": cloud("notes_expected.docx"),
      "options": {"ignore_blanks": False, "delete_empty_lines": True}},
     ["libreoffice_writer"], [keys_then_type("pyautogui.hotkey('ctrl', 'Home')", "Bunshin notes\nSnapshots are cheap.", 0.3), save('~/Documents/notes.docx'), "DONE"])

# ---------------- chromium ----------------
def go(url, after=1.5): return "pyautogui.hotkey('ctrl', 'l'); time.sleep(0.3); " + typ(url + "\n", after)
task("chrome-open-about", "Open the About page of the documentation site shown in the browser.",
     CHROME, {"func": "is_expected_active_tab", "result": {"type": "active_tab_info"}, "expected": rule({"type": "url", "url": SITE + "about.html"})},
     ["chrome"], [go("127.0.0.1:18765/about.html"), "DONE"])
task("chrome-search", "Use the site's search page to search for: forkable workspaces",
     CHROME, {"func": "is_expected_url_pattern_match", "result": {"type": "active_tab_info"},
              "expected": rule({"expected": [r"/results\.html\?q=forkable\+workspaces$"]})},
     ["chrome"], [go("127.0.0.1:18765/search.html", 2.5), typ("forkable workspaces\n", 1.5), "DONE"])
task("chrome-two-tabs", "I want exactly two tabs open: the site's About page and its Contact page.",
     CHROME, {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"},
              "expected": rule({"type": "url", "urls": [SITE + "about.html", SITE + "contact.html"]})},
     ["chrome"], [go("127.0.0.1:18765/about.html"), "pyautogui.hotkey('ctrl', 't'); time.sleep(1.5)", go("127.0.0.1:18765/contact.html"), "DONE"])
task("chrome-close-tab", "Close the browser tab showing the Contact page; keep the others open.",
     CHROME + [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": [SITE + "about.html", SITE + "contact.html"]}},
               {"type": "sleep", "parameters": {"seconds": 1}}],
     {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"},
      "expected": rule({"type": "url", "urls": [SITE + "index.html", SITE + "about.html"]})},
     ["chrome"], ["pyautogui.hotkey('ctrl', '3'); time.sleep(0.5); pyautogui.hotkey('ctrl', 'w'); time.sleep(1)", "DONE"])
task("chrome-contact-form", "Send the site's contact form with the name Ada.",
     CHROME, {"func": ["is_expected_url_pattern_match", "check_include_exclude"],
              "result": [{"type": "active_tab_info"}, {"type": "active_url"}],
              "expected": [rule({"expected": [r"/thanks\.html\?name=Ada$"]}), rule({"include": ["thanks.html"], "exclude": ["contact.html"]})]},
     ["chrome"], [go("127.0.0.1:18765/contact.html", 2.5), typ("Ada\n", 1.5), "DONE"])



def render() -> dict[Path, str]:
    """Every task and oracle file: path → exact JSON text."""
    out: dict[Path, str] = {}
    for tid, t, oracle in _SPECS:
        out[T / f"{tid}.json"] = json.dumps(t, indent=2) + "\n"
        out[O / f"{tid}.json"] = json.dumps(oracle, indent=2) + "\n"
    return out


def main() -> None:
    T.mkdir(exist_ok=True)
    O.mkdir(exist_ok=True)
    files = render()
    for p, text in files.items():
        p.write_text(text)
    print(f"wrote {len(files) // 2} tasks and their oracles")


if __name__ == "__main__":
    main()
